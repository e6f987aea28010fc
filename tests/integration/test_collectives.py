"""posviz's object collectives in two real gloo processes: every process's object, whole, and tensors held until the
group is torn down (the cause of a teardown deadlock under torch < 2.8; see posviz.train.collectives)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, pathlib, sys
    import torch.distributed as dist
    from posviz.train import collectives
    from posviz.train.processes import process_rank, training_processes

    def made_by(rank):  # each process's object, of a different size, which every process can make to compare
        return {"rank": rank, "rows": [{"layer": i, "x": i / 3} for i in range(7 + 40 * rank)], "text": "é" * rank}

    rank = process_rank()
    with training_processes() as rank:
        dist.init_process_group("gloo")
        gathered = collectives.all_gather_objects(made_by(rank))
        sent = collectives.broadcast_object(made_by(rank) if rank == 1 else "ignored", src=1)
        held_inside = len(collectives._HELD)
    out = pathlib.Path(sys.argv[1]) / f"rank{rank}.json"  # a file each: the processes share one stdout
    out.write_text(json.dumps({"rank": rank, "gathered": gathered == [made_by(0), made_by(1)],
                               "sent": sent == made_by(1), "held_inside": held_inside,
                               "held_after": len(collectives._HELD)}))
""")


@pytest.mark.slow
def test_object_collectives_deliver_every_object_and_hold_their_tensors_until_teardown(tmp_path):
    script = tmp_path / "collect.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        str(script), str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [d["rank"] for d in lines] == [0, 1]
    for d in lines:
        assert d["gathered"] and d["sent"], d
        # gather: own payload, own size, 2 sizes, padded, 2 parts = 7; broadcast: size (+ payload sent or received) = 2
        assert d["held_inside"] == 9
        assert d["held_after"] == 0  # let go once destroy_process_group returned
