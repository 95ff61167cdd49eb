"""session 18 call 8: the CUDA one-launch test with B1's splits of 32 rows (MAX_SPLITS 256, BLOCK_N 32, MIN_CHUNK 32)."""
import sys
sys.path.insert(0, "tests")
sys.path.insert(0, ".")
import pytest
import decode_mega as dm
import test_decode_mega as t

for variant, batch in [("tucker", 1), ("mha", 1), ("tucker_shared", 3), ("gqa", 3)]:
    mp = pytest.MonkeyPatch()
    for k, v in dict(MAX_SPLITS=256, BLOCK_N=32, MIN_CHUNK=32).items():
        mp.setattr(dm, k, v)
    try:
        t.test_cuda_one_launch_matches_the_phases_and_the_model(variant, batch, {}, mp)
        print("ok", variant, batch, flush=True)
    finally:
        mp.undo()
