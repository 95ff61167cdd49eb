"""
Command-line configuration, nanoGPT style but without exec'ing into the caller's globals:

    python train.py config/owt_tucker.py --batch_size=32 --compile=False --tucker_ranks=8,64,64

Arguments are applied in order: a config file (a .py file of `key = value` lines, run in
a fresh namespace) or a `--key=value` override. A config file may start with
`include("shakespeare_base.py")` to run a shared base file (path relative to the including
file) into its own namespace first, so per-variant files hold only what differs. Every key must already exist in the
defaults and every value must match the type of its default, so a typo or a wrong type
fails loudly at startup instead of being silently ignored. A config file that does not run
(a syntax error, an exception) is a ValueError of one line naming the file and the line.

Usage from a script:

    from configurator import parse_config, format_config
    config = parse_config(sys.argv[1:], defaults)   # defaults: dict of key -> default value
    print(format_config(config))
"""
import ast
import difflib
import inspect
import os
from typing import Optional


def parse_config(argv: list[str], defaults: dict, given: Optional[set] = None) -> dict:
    """Apply config files and --key=value overrides from `argv` (in order) onto a copy of `defaults`.
    `given`, if a set, receives every key that a file or an override set (even to its default)."""
    cfg = dict(defaults)
    given = set() if given is None else given
    for arg in argv:
        if arg.startswith("--"):
            key, sep, raw = arg[2:].partition("=")
            if not sep or not key:
                raise ValueError(f"bad override {arg!r}: write overrides as --key=value")
            source = f"override {arg!r}"
            _check_known(key, defaults, source)
            cfg[key] = _coerce(key, _parse_cli_value(raw, defaults[key]), defaults[key], source)
            given.add(key)
        else:
            for key, value in _load_config_file(arg).items():
                _check_known(key, defaults, arg)
                cfg[key] = _coerce(key, value, defaults[key], arg)
                given.add(key)
    return cfg


def check_device(name: str) -> str:
    """The torch device a `device` key names ('' = cuda if available, else cpu), checked to exist
    here; ValueError (naming the key and the allowed values) otherwise."""
    import torch  # lazy: the rest of this module needs no torch

    if not name:
        return "cuda" if torch.cuda.is_available() else "cpu"
    allowed = "allowed '' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N', 'mps'"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"device={name!r} is unknown: {allowed}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={name!r} but CUDA is not available here: use device='cpu' (or '')")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device={name!r} but there are {torch.cuda.device_count()} CUDA devices: allowed "
                             f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    elif device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"device={name!r} but MPS is not available here: use device='cpu' (or '')")
    elif device.type != "cpu":
        raise ValueError(f"device={name!r} is not supported: {allowed}")
    return name


def make_current(device) -> None:
    """Make a `cuda:N` device the current one: Triton launches its kernels, and CUDA graphs capture, on the current
    device, not on their tensors'. A bare 'cuda' names the current device already, and torch.cuda.set_device
    refuses a device without an index (torch 2.11), so it is left as it is; other devices have nothing to set."""
    if device.type == "cuda" and device.index is not None:
        import torch  # lazy: the rest of this module needs no torch

        torch.cuda.set_device(device)


def default_dtype(device) -> str:
    """dtype='' (train.py's and sample.py's default): 'bfloat16' on a GPU whose hardware computes in it (compute
    capability 8.0 and up: A100, RTX 30xx and later), else 'float32'. torch.cuda.is_bf16_supported() alone also says
    yes for older GPUs (T4, V100) where bfloat16 is only emulated, slowly: no bfloat16 tensor cores (Triton 3.6 does
    compile the kernels' bfloat16 products for sm_75 and sm_70, as FMA loops, e.g. decode_wide's step with no HMMA
    and 2 KB of spills a thread: scripts/mega_sass --arch 75)."""
    if device.type != "cuda":
        return "float32"
    import torch  # lazy: the rest of this module needs no torch

    return "bfloat16" if torch.cuda.is_bf16_supported(including_emulation=False) else "float32"


def float64_device(device):
    """Where float64 sums over `device`'s tensors run: the device itself, or the CPU for an Apple GPU ('mps'),
    which has no float64 (a float64 tensor there raises TypeError)."""
    import torch  # lazy: the rest of this module needs no torch

    device = torch.device(device)
    return torch.device("cpu") if device.type == "mps" else device


def format_config(cfg: dict) -> str:
    """One `key = value` line per entry, aligned, in insertion order."""
    width = max((len(k) for k in cfg), default=0)
    return "\n".join(f"{k:<{width}} = {v!r}" for k, v in cfg.items())


def help_requested(argv: list[str], doc: str, defaults: dict) -> bool:
    """`-h` / `--help` anywhere in argv: print the script's docstring and every key with its default, and say so
    (the caller exits 0). Not an override: without this, `--help` would be 'bad override'."""
    if not any(a in ("-h", "--help") for a in argv):
        return False
    print(doc.strip() + "\n\nKeys (config file `key = value` or `--key=value`) and their defaults:\n"
          + format_config(defaults))
    return True


# -----------------------------------------------------------------------------
# helpers


def _load_config_file(path: str) -> dict:
    """Run a config file in a fresh namespace; return its public top-level values."""
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"config file not found: {path!r} (arguments without a leading '--' are config files; "
            f"overrides are written --key=value)")
    if not path.endswith(".py"):
        raise ValueError(f"config file {path!r} must be a .py file of `key = value` lines")
    ns = {"__name__": "__config__"}
    _run_into(path, ns, stack=())
    # imports, helper functions and classes, and _private names are the file's own business
    return {k: v for k, v in ns.items()
            if not k.startswith("_")
            and not (inspect.ismodule(v) or inspect.isfunction(v) or inspect.isclass(v) or inspect.isbuiltin(v))}


class ConfigFileError(ValueError):
    """A config file that does not run: one line naming the file and the line."""


def _run_into(path: str, ns: dict, stack: tuple) -> None:
    """Execute config file `path` into namespace `ns`, giving it `include(other)`."""
    path = os.path.abspath(path)
    if path in stack:
        raise ValueError(f"config include cycle: {' -> '.join(stack + (path,))}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"included config file not found: {path!r} (paths are relative to the including file)")

    def include(rel: str) -> None:
        _run_into(os.path.join(os.path.dirname(path), rel), ns, stack + (path,))
        ns["include"] = include  # the included file bound its own: this file's next include is relative to it again

    with open(path, encoding="utf-8") as f:
        src = f.read()
    ns["include"] = include
    try:
        code = compile(src, path, "exec")
    except SyntaxError as e:  # also IndentationError
        raise ConfigFileError(f"config file {path}, line {e.lineno}: {type(e).__name__}: {e.msg}") from None
    try:
        exec(code, ns)
    except ConfigFileError:  # from an included file: already says where
        raise
    except Exception as e:
        line = next((tb.tb_lineno for tb in _frames(e.__traceback__) if tb.tb_frame.f_code.co_filename == path), "?")
        message = " ".join(str(e).split())  # one line
        raise ConfigFileError(f"config file {path}, line {line}: {type(e).__name__}: {message}") from None


def _frames(tb):
    """The traceback's entries, innermost first."""
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out[::-1]


def _check_known(key: str, defaults: dict, source: str) -> None:
    if key in defaults:
        return
    close = difflib.get_close_matches(key, list(defaults), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ValueError(f"unknown config key {key!r} in {source}{hint}; valid keys: {', '.join(sorted(defaults))}")


def _literal(raw: str):
    """Python literal if `raw` is one ('3', 'True', '(8,64)', "'x'"), else the raw string."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


def _parse_cli_value(raw: str, default):
    value = _literal(raw)
    # for a string key the raw text is the value (--wandb_run_name=2024 means '2024', not 2024),
    # unless it was written as a quoted string literal
    if isinstance(default, str) and not isinstance(value, str):
        return raw
    return value


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_error(key, value, expected, source):
    return ValueError(f"config key {key!r} in {source}: got {value!r} ({type(value).__name__}), expected {expected}")


def _coerce(key: str, value, default, source: str):
    """Check `value` against the type of `default` and convert where it is lossless."""
    if default is None:  # no type to check against: any literal (None, int, tuple, str, ...)
        return value
    if isinstance(default, bool):  # before int: bool is a subclass of int
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _type_error(key, value, "bool (True or False)", source)
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _type_error(key, value, "int", source)
    if isinstance(default, float):
        if _is_number(value):
            try:
                return float(value)
            except OverflowError:  # an int beyond the largest float (400 digits): one line, not float()'s traceback
                raise ValueError(f"config key {key!r} in {source}: got an int beyond the largest float (about "
                                 "1.8e308), expected float") from None
        raise _type_error(key, value, "float", source)
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise _type_error(key, value, "str", source)
    if isinstance(default, (tuple, list)):
        kind = type(default).__name__
        if isinstance(value, str):  # "8,64,64" -> (8, 64, 64); "8," -> (8,)
            value = [_literal(s.strip()) for s in value.split(",") if s.strip()]
        if not isinstance(value, (tuple, list)):
            raise _type_error(key, value, f"{kind} (e.g. 8,64,64)", source)
        # numeric defaults (ranks, betas, ...) need numeric entries
        if default and all(_is_number(d) for d in default) and not all(_is_number(v) for v in value):
            raise _type_error(key, value, f"{kind} of numbers (e.g. 8,64,64)", source)
        return type(default)(value)
    if isinstance(value, type(default)):  # any other type (dict, ...): same type required
        return value
    raise _type_error(key, value, type(default).__name__, source)
