"""A Triton kernel's launches recorded instead of run, typed as the JIT launcher types them, and compiled for Hopper
(sm_90) on a machine without a GPU or driver: tests/test_kernels_compile.py lowers them to TTIR (what Triton's front
end refuses), scripts/mega_sass.py to machine code (where the loads and fences sit).

    rec = Recorder(module.kernel); module.kernel = rec      # a wrapper's launches, recorded
    signature, constexprs, num_warps = typed(rec.kernel, *rec.launches[0])
"""
import torch

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64",
               torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5", torch.int64: "i64", torch.int32: "i32",
               torch.int16: "i16", torch.int8: "i8", torch.uint32: "u32", torch.uint16: "u16", torch.uint8: "u8",
               torch.bool: "u1"}  # the pointers' element types as Triton's launcher names them (jit.mangle_type)


class Recorder:
    """Stands for a @triton.jit kernel: kernel[grid](*args, **kwargs) records the launch instead of running it."""

    def __init__(self, kernel):
        self.kernel, self.launches, self.grids = kernel, [], []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


def _values(kernel, args, kwargs) -> dict:
    values = dict(zip(kernel.arg_names, args))
    values.update({k: v for k, v in kwargs.items() if k in kernel.arg_names})
    return values


def typed(kernel, args, kwargs):
    """(signature, constexprs, num_warps) of a recorded launch, as the launcher would type its arguments."""
    values = _values(kernel, args, kwargs)

    def type_of(name, v):
        if torch.is_tensor(v):
            return "*" + DTYPE_NAMES[v.dtype]
        if isinstance(v, bool):
            return "i1"
        if isinstance(v, int):
            return "i32" if -2 ** 31 <= v < 2 ** 31 else "u64" if v >= 2 ** 63 else "i64"  # the launcher's widths
        if isinstance(v, float):
            return "fp32"
        if isinstance(v, tuple):  # a tuple argument (master_adamw's multi-tensor kernel): its elements' types
            return tuple(type_of(name, x) for x in v)
        raise TypeError(f"{name}: {type(v).__name__}")

    sig, const = {}, {}
    for p in kernel.params:
        v = values[p.name]
        if p.is_constexpr:
            sig[p.name], const[p.name] = "constexpr", v
        else:
            sig[p.name] = type_of(p.name, v)
    return sig, const, kwargs.get("num_warps", 4)


def specialization(kernel, args, kwargs, signature: dict, constexprs: dict) -> dict:
    """The attrs the JIT launcher would give this launch (tt.divisibility 16 for 16-aligned pointers and integers
    divisible by 16); integers equal to 1 become constexprs in signature / constexprs, as the JIT makes them. Without
    it Triton cannot prove 16-byte alignment: 2-byte loads and spills the GPU's compile does not have."""
    values = _values(kernel, args, kwargs)
    attrs = {}
    for i, p in enumerate(kernel.params):
        if p.is_constexpr:
            continue
        v = values[p.name]
        if torch.is_tensor(v):
            if v.data_ptr() % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, int) and not isinstance(v, bool):
            if v == 1:
                signature[p.name], constexprs[p.name] = "constexpr", 1
            elif v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return attrs


def compile_to_ttir(kernel, signature: dict, constexprs: dict, num_warps: int = 4) -> str:
    """kernel's TTIR as text for these argument types ({'X': '*bf16', 'V': 'i32', ...}, constexprs listed in the
    signature as 'constexpr' and valued in `constexprs`), by Triton's front end for sm_90; an error where it refuses
    the kernel. No GPU or driver needed."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    options = backend.parse_options({"num_warps": num_warps})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = ASTSource(kernel, signature, constexprs=constexprs).make_ir(
        target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
    return str(module)


def compile_sm90(kernel, args, kwargs):
    """A recorded launch compiled to the end for sm_90 (ptxas included), with the launcher's specialization:
    triton's CompiledKernel (its asm dict holds 'ptx' and 'cubin')."""
    return compile_launch(kernel, args, kwargs, arch=90)


def compile_launch(kernel, args, kwargs, arch: int = 90):
    """compile_sm90 for another compute capability (80: A100, 86 / 89: the RTX / L-series parts, 90: Hopper):
    CompiledKernel.metadata.shared is the shared memory a program takes there."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    signature, constexprs, num_warps = typed(kernel, args, kwargs)
    attrs = specialization(kernel, args, kwargs, signature, constexprs)
    options = {"num_warps": num_warps}
    if "num_stages" in kwargs:  # the launch's software pipelining depth (Triton's default 3 otherwise)
        options["num_stages"] = kwargs["num_stages"]
    if kwargs.get("maxnreg"):  # the launch's register cap a thread
        options["maxnreg"] = kwargs["maxnreg"]
    return triton.compile(ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", arch, 32), options=options)
