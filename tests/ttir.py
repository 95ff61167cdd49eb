"""Triton kernels compiled to TTIR for Hopper (sm_90) on a machine without a GPU: the front end's type checks
(e.g. a loop-carried variable whose type changes, a name one constexpr branch leaves behind for another) run
here, which Triton's interpreter (tests/interpreted.py) does not do: it runs the kernel as Python."""
import pytest


def compile_to_ttir(kernel, signature: dict, constexprs: dict, num_warps: int = 4) -> str:
    """kernel's TTIR as text for these argument types ({'X': '*bf16', 'V': 'i32', ...}, constexprs listed in the
    signature as 'constexpr' and valued in `constexprs`); an error where the front end refuses the kernel."""
    pytest.importorskip("triton")
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
    source = ASTSource(kernel, signature, constexprs=constexprs)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    return str(module)
