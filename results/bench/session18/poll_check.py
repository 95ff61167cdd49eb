"""session 18 call 6: the CUDA one-launch test with decode_mega.POLL set (the staggered relaxed-load poll)."""
import sys
sys.path.insert(0, "tests")
sys.path.insert(0, ".")
import pytest
import decode_mega as dm
import test_decode_mega as t

for poll in (150,):
    for variant, batch, knobs in [("tucker", 1, {}), ("mha", 1, {}), ("tucker_shared", 3, {}), ("tucker", 1, t.UNFUSED)]:
        mp = pytest.MonkeyPatch()
        mp.setattr(dm, "POLL", poll)
        try:
            t.test_cuda_one_launch_matches_the_phases_and_the_model(variant, batch, knobs, mp)
            print("ok", poll, variant, batch, knobs, flush=True)
        finally:
            mp.undo()
mp = pytest.MonkeyPatch()
mp.setattr(dm, "POLL", 150)
t.test_cuda_timed_step_stamps_every_barrier_in_order()
print("ok timed step POLL=150")
mp.undo()
