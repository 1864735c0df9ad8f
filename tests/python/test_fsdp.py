"""accordion.compress_fsdp: FSDP2 sharded within each replica, the gradient shards
exchanged across the replicas by the toolkit's compressors. Four ranks over Gloo
as 2 replicas x 2 shards (fsdp_worker.py): level none against FSDP's own hybrid
sharding, PowerSGD against the paper's algorithm written in the worker, the floats
sent against the wire sizes worked out from the shard shapes, a schedule replayed
by parameter name, every compressor on float32 and bf16 shards, a resumed run, the
example, and everything refused."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import accordion
from conftest import RUN_SECONDS, TREE, regime_detect, run_ranks
from ports import free_port
from test_hook import floats_per_step

try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401 (FSDP2, PyTorch 2.x)
    HAS_FSDP2 = True
except Exception:  # 1.13's fsdp package does not import under Python 3.11 (ValueError)
    HAS_FSDP2 = False

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp_worker.py")
needs_fsdp2 = pytest.mark.skipif(not HAS_FSDP2,
                                 reason="compress_fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch 2.x); "
                                        "test_an_old_torch_is_told_fsdp2_is_needed checks the error this torch gives")
SHAPES = {"fc1.weight": (25, 12), "fc1.bias": (25,), "fc2.weight": (10, 25), "fc2.bias": (10,),
          "fc3.weight": (1, 10), "fc3.bias": (1,)}
STEPS = 10

_runs = {}


def run(tmp_path, *arguments):
    """Every rank's JSON of `fsdp_worker.py train ARGUMENTS`; runs without files are
    deterministic, and made once for every test that asks for them."""
    key = tuple(str(a) for a in arguments)
    if key not in _runs or {"--schedule", "--save-after", "--start", "--record"} & set(key):
        ranks = run_ranks(["train", "--steps", STEPS, *arguments], cwd=tmp_path, world=4, worker=WORKER)
        assert ranks.codes == [0] * 4, ranks.describe()
        _runs[key] = [json.loads(ranks.stdout(r)) for r in range(4)]
    return _runs[key]


def shard_shape(shape, shard, shards=2):
    """The rows of dimension 0 that shard `shard` holds, as fully_shard splits them
    (torch.chunk: ceil(rows / shards) each, the last ones fewer or none)."""
    per = -(-shape[0] // shards)
    return (max(0, min(per, shape[0] - shard * per)),) + tuple(shape[1:])


def wire_floats(levels, shard):
    # A shard without rows is not exchanged.
    return sum(floats_per_step(levels[name], shard_shape(shape, shard)) for name, shape in SHAPES.items()
               if shard_shape(shape, shard)[0])


def max_difference(a, b):
    return max(float(np.abs(np.array(a[name]) - np.array(b[name])).max()) for name in a)


@needs_fsdp2
def test_level_none_is_fsdps_own_hybrid_sharding(tmp_path):
    # Both average each shard within the replica (FSDP's reduce-scatter) and then
    # across the replicas; the library's allreduce sums and divides as Gloo's average
    # does. Asserted to fp32 rounding after 10 steps (1e-6 on weights near 0.2), seen
    # bit for bit.
    native, ours = run(tmp_path), run(tmp_path, "--compress", "none")
    for rank in range(4):
        assert max_difference(ours[rank]["parameters"], native[rank]["parameters"]) <= 1e-6, rank
    # The replicas (ranks 0 and 2) trained on other batches and end with the same
    # parameters: their shards were exchanged.
    assert ours[0]["losses"] != ours[2]["losses"]
    assert ours[0]["parameters"] == ours[2]["parameters"]
    assert [r["steps"] for r in ours] == [STEPS] * 4


@needs_fsdp2
@pytest.mark.parametrize("rank", [1, 2])
def test_powersgd_on_the_shards_is_the_papers(tmp_path, rank):
    # The same shard matrices (rows as fully_shard splits them), the same first Q,
    # warm start and error feedback: 10 steps agree to fp32 rounding (seen: 6e-8),
    # while compression moved the parameters 1e-4 and more away from uncompressed.
    ours = run(tmp_path, "--compress", f"powersgd:{rank}")
    paper = run(tmp_path, "--reference-powersgd", rank)
    native = run(tmp_path)
    for r in range(4):
        assert max_difference(ours[r]["parameters"], paper[r]["parameters"]) <= 1e-6, r
        assert max_difference(ours[r]["parameters"], native[r]["parameters"]) > 1e-4, r


@needs_fsdp2
@pytest.mark.parametrize("spec", ["none", "powersgd:2", "fp16"])
def test_floats_sent_are_the_wire_sizes_of_the_shards(tmp_path, spec):
    # fc1's 25 rows are 13 + 12 over the 2 shards, fc3's one row 1 + 0: each rank
    # sends what its shards' shapes take at their levels (vectors whole).
    result = run(tmp_path, "--compress", spec)
    levels = {name: spec if len(shape) == 2 else "none" for name, shape in SHAPES.items()}
    for rank, out in enumerate(result):
        shard = rank % 2  # ranks 0 and 2 hold shard 0, 1 and 3 shard 1
        assert {n: tuple(s) for n, s in out["shards"].items()} == {n: shard_shape(s, shard) for n, s in SHAPES.items()}
        assert out["floats"] == STEPS * wire_floats(levels, shard), rank
        assert out["epochs"][0]["levels"] == levels
    if spec == "powersgd:2":
        # Error memories per parameter shard; fc3's (1, 10) rows are sent whole, with
        # the error feedback powerSGD_hook gives them; the empty shard keeps nothing.
        assert [r["saved"] for r in result[:2]] == [
            ["fc1.weight/error", "fc1.weight/powersgd_q", "fc2.weight/error", "fc2.weight/powersgd_q",
             "fc3.weight/error"],
            ["fc1.weight/error", "fc1.weight/powersgd_q", "fc2.weight/error", "fc2.weight/powersgd_q"]]
        assert [r["floats"] for r in result] == [1390, 1250, 1390, 1250]  # worked out by hand


@needs_fsdp2
def test_steps_before_start_step_go_uncompressed(tmp_path):
    # FSDP tells no step's end: a step ends when a module's hook comes round again.
    # Steps 0-3 are sent at level none, 4-9 at powersgd:2.
    result = run(tmp_path, "--compress", "powersgd:2", "--start-step", "4")
    compressed = {name: "powersgd:2" if len(shape) == 2 else "none" for name, shape in SHAPES.items()}
    for rank, out in enumerate(result):
        none = wire_floats({name: "none" for name in SHAPES}, rank % 2)
        assert out["floats"] == 4 * none + 6 * wire_floats(compressed, rank % 2), rank
        assert out["steps"] == STEPS


@needs_fsdp2
@pytest.mark.parametrize("mode", [["--compress", "none"], ["--compress", "topk:0.1"], ["--compress", "powersgd:2"],
                                  ["--compress", "topk:0.1", "--start-step", "4"],
                                  ["--compress", "topk:0.1", "--reduce-dtype", "bfloat16"]],
                         ids=["none", "topk", "powersgd", "start_step", "bf16"])
def test_one_exchange_a_step_gives_the_averages_of_one_a_module(tmp_path, mode):
    # one_exchange=True hands FSDP zeros from each module's hook and exchanges every
    # module's shards together at the end of the backward pass, adding the averages to
    # the gradients: the same floats sent, steps counted and state kept, and with
    # compressors that draw nothing the same parameters after 10 steps to fp32
    # rounding (1e-6; seen equal). PowerSGD draws its first Q once per exchange, as
    # powerSGD_hook draws once per bucket, so one exchange a step starts from other Qs.
    apart, together = run(tmp_path, *mode), run(tmp_path, *mode, "--one-exchange")
    for rank in range(4):
        assert together[rank]["floats"] == apart[rank]["floats"] and together[rank]["steps"] == STEPS, rank
        assert together[rank]["saved"] == apart[rank]["saved"] and together[rank]["finite"], rank
        difference = max_difference(together[rank]["parameters"], apart[rank]["parameters"])
        if "powersgd:2" in mode:
            assert difference > 1e-6, rank
        else:
            assert difference <= 1e-6, rank
    if mode == ["--compress", "none"]:
        native = run(tmp_path)
        for rank in range(4):
            assert max_difference(together[rank]["parameters"], native[rank]["parameters"]) <= 1e-6, rank


@needs_fsdp2
def test_accumulated_gradients_are_exchanged_at_the_synchronised_step(tmp_path):
    # 2 micro-batches per step, the first under set_requires_gradient_sync(False):
    # FSDP reduces once per step, and so does the exchange; level none still gives
    # what FSDP's own hybrid sharding gives.
    native, ours = run(tmp_path, "--accumulate", "2"), run(tmp_path, "--compress", "none", "--accumulate", "2")
    for rank in range(4):
        assert max_difference(ours[rank]["parameters"], native[rank]["parameters"]) <= 1e-6, rank
        assert ours[rank]["floats"] == STEPS * wire_floats({name: "none" for name in SHAPES}, rank % 2)
        assert ours[rank]["steps"] == STEPS
    assert ours[0]["parameters"] != run(tmp_path, "--compress", "none")[0]["parameters"]


@needs_fsdp2
def test_online_accordion_decides_from_rank_0s_local_gradients(tmp_path):
    # Rank 0 sums its raw local gradients, seen at its reduce-scatter's input; the
    # worker computes them again on a plain copy of the model. The norms agree, and
    # Accordion's rule (accordion.detect, regime-detect's) on the copy's norms gives
    # the levels every rank used, epoch by epoch.
    result = run(tmp_path, "--accordion", "--epochs", "6", "--steps", "3")
    first = result[0]
    assert len(first["online_norms"]) == 5  # epoch 5's are taken at the next set_epoch()
    np.testing.assert_allclose(first["online_norms"], first["reference_norms"][:5], rtol=1e-6)
    norms = {name: [row[i] for row in first["reference_norms"]] for i, name in enumerate(SHAPES)}
    schedule = accordion.detect(norms, parameters=list(SHAPES.items()), lr=[0.1] * 4 + [0.01] * 2, eta=0.5,
                                interval=2, low="powersgd:4", high="powersgd:1")
    for rank, out in enumerate(result):
        for epoch in out["epochs"]:
            assert epoch["levels"] == schedule.levels(epoch["epoch"]), (rank, epoch)
            assert epoch["critical"] == schedule.critical(epoch["epoch"]), (rank, epoch)
            assert epoch["floats"] == 3 * wire_floats(epoch["levels"], rank % 2), (rank, epoch)
    assert {e["levels"]["fc1.weight"] for e in first["epochs"]} == {"powersgd:4", "powersgd:1"}


@needs_fsdp2
def test_the_automatic_mode_plans_on_rank_0_for_every_replica_group(tmp_path):
    # compress_fsdp(auto=True), 2 replicas x 2 shards: the first epoch goes uncompressed
    # and times the step (3 steps, each of which exchanges 3 modules); from the second,
    # global rank 0 plans on the link its replica group measured (both groups measure at
    # once) and every rank of the world exchanges its shard at rank 0's levels. Whether
    # compression pays on this machine varies, so each epoch's levels are checked
    # against the guard's rule on the record's own predictions, as for DDP.
    margin = 0.05
    result = run(tmp_path, "--auto", "--margin", margin, "--epochs", "4", "--steps", "3")
    records = result[0]["epochs"]
    first = records[0]
    assert set(first["levels"].values()) == {"none"}
    assert set(first["auto"]["reasons"].values()) == {"measuring"}
    assert first["auto"]["summary"].startswith("measuring: ")
    assert first["auto"]["measured"] is True and first["auto"]["allreduce_bandwidth"] > 0
    for rank, out in enumerate(result):
        assert [e["levels"] for e in out["epochs"]] == [e["levels"] for e in records], rank
        for epoch in out["epochs"]:
            assert epoch["floats"] == 3 * wire_floats(epoch["levels"], rank % 2), (rank, epoch)
            assert "auto" not in epoch or rank == 0
        assert out["finite"] and out["steps"] == 12
    for epoch in records:
        record = epoch["auto"]
        assert record["steps"] == 3 and record["measured_seconds"] > 0, record  # steps, not module exchanges
    for epoch in records[1:]:
        record, levels = epoch["auto"], epoch["levels"]
        assert record["measured"] is False  # measuring again would take more than 3 % of these short epochs
        assert {record["reasons"][name] for name in SHAPES if len(SHAPES[name]) == 1} == {"vector"}
        assert record["predicted_seconds"] > 0 and record["compute_seconds"] > 0
        if record["pays"]:
            assert record["compressed_seconds"] < (1 - margin) * record["uncompressed_seconds"], record
            assert record["summary"].startswith("pays: ")
        else:
            assert not record["compressed_seconds"] < (1 - margin) * record["uncompressed_seconds"], record
            assert record["summary"].startswith("does not pay: ")
            assert set(levels.values()) == {"none"}
            assert {record["reasons"][name] for name in SHAPES if len(SHAPES[name]) == 2} == {"does not pay"}


def write_grads(path):
    """A gradient-statistics file of fsdp_worker.Net's parameters, written with h5py alone."""
    names, shapes = list(SHAPES), list(SHAPES.values())
    norm = np.array([[1.0, 0.5, 2.0, 0.1, 1.5, 0.2]] * 6)
    norm[2] *= [2.0, 1.0, 1.05, 3.0, 1.0, 1.0]  # fc1.weight changes much at epoch 2
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.grads"
        f.attrs["format_version"] = "1.0"
        f["parameters/name"] = np.array(names, dtype=h5py.string_dtype())
        f["parameters/ndim"] = np.array([len(s) for s in shapes], dtype=np.int32)
        f["parameters/shape"] = np.array([list(s) + [0] * (2 - len(s)) for s in shapes], dtype=np.int64)
        f["parameters/numel"] = np.array([int(np.prod(s)) for s in shapes], dtype=np.int64)
        f["epochs/norm"] = norm
        f["epochs/lr"] = np.array([0.1] * 4 + [0.01] * 2)
        f["epochs/steps"] = np.full(6, 10, dtype=np.int64)


def read_norms(path):
    """The recorded names, shapes and norms, read with h5py (code the toolkit did not write)."""
    with h5py.File(path, "r") as f:
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["parameters/name"][:]]
        shapes = [tuple(int(d) for d in row[:n]) for row, n in zip(f["parameters/shape"][:], f["parameters/ndim"][:])]
        return names, shapes, f["epochs/norm"][:], int(f.attrs["complete"]), int(f.attrs["world_size"])


@needs_fsdp2
@pytest.mark.parametrize("mode", [["--compress", "powersgd:2"], [], ["--plain"], ["--accumulate", "2"],
                                  ["--reduce-dtype", "bfloat16"]],
                         ids=["compress_fsdp", "fsdp-hybrid-sharding", "fully_shard-over-all-ranks", "accumulation",
                              "bf16-reduce_dtype"])
def test_the_recorder_sums_rank_0s_local_gradients(tmp_path, mode):
    # The recorder reads rank 0's reduce-scatter input, each parameter's chunks joined
    # back: under compress_fsdp (which shares the reduce-scatter's wrapper), under FSDP's
    # own hybrid sharding over the 2-D mesh and sharded over all 4 ranks. The worker
    # computes rank 0's local gradients again on a plain copy of the model; float32
    # sums against float64 ones, as test_recorder.py allows (2e-6 relative). With 2
    # micro-batches per step, FSDP reduce-scatters the accumulated gradient once per
    # step: the same sums, and 3 steps counted per epoch. With a bf16 reduce_dtype the
    # reduce-scatter's input is each gradient rounded to bf16 (8 bits of mantissa),
    # summed in float32: within 5% (seen: 1.2%, on the sum of 3 steps that partly
    # cancel, the last layer's).
    result = run(tmp_path, *mode, "--record", "grads.h5", "--epochs", "3", "--steps", "3")
    names, shapes, norms, complete, world = read_norms(tmp_path / "grads.h5")
    assert dict(zip(names, shapes)) == SHAPES and names == list(SHAPES)  # the whole parameters, the model's order
    assert (complete, world, norms.shape) == (1, 4, (3, len(SHAPES)))
    np.testing.assert_allclose(norms, result[0]["reference_norms"], rtol=0.05 if "bfloat16" in mode else 2e-6)
    with h5py.File(tmp_path / "grads.h5", "r") as f:
        assert list(f["epochs/steps"][:]) == [3, 3, 3]
    # The package's reader (regime-detect's) takes the file and names the model's parameters.
    assert accordion.detect(tmp_path / "grads.h5", interval=1).parameters == list(SHAPES.items())


@needs_fsdp2
def test_online_accordion_and_the_recorder_share_rank_0s_gradients(tmp_path, programs):
    # Both read the same wrapped reduce-scatter: the recorder's file of the run gives,
    # through regime-detect, the levels online Accordion chose epoch by epoch.
    result = run(tmp_path, "--accordion", "--record", "grads.h5", "--epochs", "6", "--steps", "3")
    names, _, norms, _, _ = read_norms(tmp_path / "grads.h5")
    np.testing.assert_allclose(norms[:5], result[0]["online_norms"], rtol=1e-6)
    np.testing.assert_allclose(norms, result[0]["reference_norms"], rtol=2e-6)
    regime_detect(programs, "grads.h5", "--interval", "2", "--low", "powersgd:4", "--high", "powersgd:1",
                  "-o", "sched.h5", cwd=tmp_path)
    schedule = accordion.load_schedule(tmp_path / "sched.h5")
    for rank, out in enumerate(result):
        for epoch in out["epochs"]:
            assert epoch["levels"] == schedule.levels(epoch["epoch"]), (rank, epoch)


@needs_fsdp2
def test_a_schedule_detected_from_an_fsdp_recording_is_replayed(tmp_path, programs):
    # record (FSDP's own hybrid sharding) -> regime-detect -> compress_fsdp(schedule=...)
    run(tmp_path, "--record", "grads.h5", "--epochs", "6", "--steps", "3")
    regime_detect(programs, "grads.h5", "--interval", "2", "--low", "powersgd:4", "--high", "powersgd:1",
                  "-o", "sched.h5", cwd=tmp_path)
    schedule = accordion.load_schedule(tmp_path / "sched.h5")
    result = run(tmp_path, "--schedule", "sched.h5", "--epochs", "6", "--steps", "3")
    seen = set()
    for rank, out in enumerate(result):
        for epoch in out["epochs"]:
            levels = schedule.levels(epoch["epoch"])
            seen.update(levels.values())
            assert epoch["levels"] == levels, (rank, epoch)
            assert epoch["floats"] == 3 * wire_floats(levels, rank % 2), (rank, epoch)
    assert {"powersgd:4", "powersgd:1"} <= seen, "the schedule must change levels for this test to mean anything"


@needs_fsdp2
def test_a_schedule_is_replayed_by_parameter_name(tmp_path, programs):
    write_grads(tmp_path / "grads.h5")
    regime_detect(programs, "grads.h5", "--interval", "2", "--low", "powersgd:4", "--high", "powersgd:1",
                  "-o", "levels.h5", cwd=tmp_path)
    schedule = accordion.load_schedule(tmp_path / "levels.h5")
    result = run(tmp_path, "--schedule", "levels.h5", "--epochs", "6", "--steps", "2")
    seen = set()
    for rank, out in enumerate(result):
        for epoch in out["epochs"]:
            levels = schedule.levels(epoch["epoch"])
            seen.update(levels.values())
            assert epoch["levels"] == levels
            assert epoch["floats"] == 2 * wire_floats(levels, rank % 2), (rank, epoch)
        assert out["steps"] == 12
    assert {"powersgd:4", "powersgd:1"} <= seen, "the schedule must change levels for this test to mean anything"


@needs_fsdp2
@pytest.mark.parametrize("spec", ["powersgd:2", "topk:0.1"])
def test_bf16_shards_go_through_float32_copies(tmp_path, spec):
    # MixedPrecisionPolicy(reduce_dtype=bfloat16): FSDP reduce-scatters bf16 shards;
    # the exchange averages float32 copies (its memories in fp32) and rounds once.
    # Each rank sends what it sends for fp32 shards, and the losses follow the fp32
    # run's within 1e-3 (bf16 keeps 8 bits of mantissa; seen: at most 6.4e-5).
    wide, narrow = run(tmp_path, "--compress", spec), run(tmp_path, "--compress", spec, "--reduce-dtype", "bfloat16")
    for a, b in zip(wide, narrow):
        assert b["floats"] == a["floats"]
        assert max(abs(x - y) for x, y in zip(a["losses"], b["losses"])) < 1e-3, (a["losses"], b["losses"])
        assert a["parameters"] != b["parameters"]  # bf16 did reduce


@needs_fsdp2
def test_every_compressor_works_on_float32_and_bf16_shards(tmp_path):
    ranks = run_ranks(["every"], cwd=tmp_path, world=4, worker=WORKER)
    assert ranks.codes == [0] * 4, ranks.describe()
    for rank in range(4):
        result = json.loads(ranks.stdout(rank))
        none = result["none float32"]["floats"]
        assert none == 3 * wire_floats({name: "none" for name in SHAPES}, rank % 2)
        for case, out in result.items():
            spec, dtype = case.split()
            assert out["finite"], (rank, case)
            # bf16 shards are exchanged as float32 copies: what is sent is float32's.
            assert out["floats"] == result[f"{spec} float32"]["floats"], (rank, case)
            assert spec in ("none", "fp16") or out["floats"] < none / 2, (rank, case)


@needs_fsdp2
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    # PowerSGD's warm-started Q and every error memory of this rank's shards travel in
    # state_dict(), by parameter name: the resumed run ends bit for bit where the
    # uninterrupted one does.
    common = ("--compress", "powersgd:1", "--epochs", "4", "--steps", "3")
    straight = run(tmp_path, *common, "--save-after", "1")
    saved = [torch.load(tmp_path / f"state.rank{rank}.pt")["exchange"] for rank in range(4)]
    resumed = run(tmp_path, *common, "--start", "2")
    for rank in range(4):
        assert resumed[rank]["parameters"] == straight[rank]["parameters"], rank
        assert resumed[rank]["epochs"] == straight[rank]["epochs"][2:], rank
        owner, entries, _ = saved[rank]["ranks"][str(rank)]
        assert owner == {"rank": rank // 2, "world_size": 2, "shard_rank": rank % 2, "shard_world_size": 2}
        assert (saved[rank]["world_size"], saved[rank]["shard_world_size"], saved[rank]["steps"]) == (2, 2, 6)
        assert float(entries["fc1.weight/error"].abs().max()) > 0


NEVER = "100000"  # a GraVAC window no run reaches: no decision depends on the clock


@needs_fsdp2
@pytest.mark.parametrize("case", ["powersgd", "gravac"])
def test_a_run_resumed_through_torch_distributed_checkpoint_equals_an_uninterrupted_one(tmp_path, case):
    # dcp.save / dcp.load with the state as a Stateful beside the model and optimizer
    # (get_state_dict): each rank's memories under its own key, since DCP keeps one
    # copy of a key several ranks save. GraVAC's gains and factors come back too.
    mode = ("--compress", "powersgd:1") if case == "powersgd" else \
        ("--gravac", "dgc", "--gravac-epsilon", "0.5", "--gravac-window", NEVER, "--gravac-theta-min", "2")
    common = (*mode, "--epochs", "4", "--steps", "3", "--dcp")
    straight = run(tmp_path, *common, "--save-after", "1")
    resumed = run(tmp_path, *common, "--start", "2")
    for rank in range(4):
        assert resumed[rank]["parameters"] == straight[rank]["parameters"], rank
        assert resumed[rank]["epochs"] == straight[rank]["epochs"][2:], rank
    from torch.distributed.checkpoint import FileSystemReader
    keys = set(FileSystemReader(str(tmp_path / "state.dcp")).read_metadata().state_dict_metadata)
    assert {f"accordion.ranks.{rank}" for rank in range(4)} <= keys


@needs_fsdp2
@pytest.mark.parametrize("through", [(), ("--dcp",)], ids=["torch.save", "dcp"])
def test_a_state_of_another_layout_goes_on_without_the_memories(tmp_path, through):
    # Elastic: saved by 2 replicas x 2 shards, loaded by 1 replica x 2 shards (2 ranks).
    # Each rank's memories are dropped with a warning; the steps go on.
    common = ("--compress", "powersgd:1", "--epochs", "4", "--steps", "3", *through)
    run(tmp_path, *common, "--save-after", "1")
    ranks = run_ranks(["train", *common, "--start", "2", "--layout", "1x2"], cwd=tmp_path, world=2, worker=WORKER)
    assert ranks.codes == [0, 0], ranks.describe()
    for rank in range(2):
        assert ("UserWarning: state_dict: saved by 2 replicas x 2 shards, loaded by 1 replica x 2 shards; each "
                "rank's error memories, PowerSGD's Q and DGC's momentum are dropped") in ranks.stderr(rank), \
            ranks.describe()
        out = json.loads(ranks.stdout(rank))
        assert out["steps"] == 12 and out["finite"], out


@needs_fsdp2
@pytest.mark.parametrize("reduce_dtype", [(), ("--reduce-dtype", "bfloat16")], ids=["float32", "bf16"])
def test_gravac_at_epsilon_one_sends_every_step_dense_as_level_none(tmp_path, reduce_dtype):
    # No compressed level keeps a gradient's whole energy: every step is dense. The
    # shards, handed back to FSDP as zeros and their average added once every module
    # has come, give what level none gives in the hook itself, bit for bit.
    result = run(tmp_path, "--gravac", "topk", "--gravac-epsilon", "1", "--gravac-window", NEVER, *reduce_dtype)
    none = run(tmp_path, "--compress", "none", *reduce_dtype)
    for rank in range(4):
        assert [(s["choice"], s["factor"]) for s in result[rank]["epochs"][0]["gravac"]] == [("dense", 1.0)] * STEPS
        assert result[rank]["parameters"] == none[rank]["parameters"], rank


@needs_fsdp2
def test_gravac_chooses_one_factor_for_every_shard(tmp_path):
    # At a tiny epsilon every step sends the first candidate, theta_s x theta_min = 20x:
    # topk keeping 1/20 of each shard's entries. Every rank of the world decides from
    # the same sums, so all 4 record the same steps; the replicas of each shard end alike.
    result = run(tmp_path, "--gravac", "topk", "--gravac-epsilon", "1e-9", "--gravac-window", NEVER, "--epochs", "2",
                 "--steps", "3")
    steps = [[step for epoch in out["epochs"] for step in epoch["gravac"]] for out in result]
    assert [(s["choice"], s["factor"]) for s in steps[0]] == [("candidate", 20.0)] * 6
    assert steps[1] == steps[2] == steps[3] == steps[0]
    assert result[0]["parameters"] == result[2]["parameters"] and result[1]["parameters"] == result[3]["parameters"]
    assert result[0]["parameters"] != run(tmp_path, "--compress", "none")[0]["parameters"]
    fixed = run(tmp_path, "--compress", "topk:0.05", "--epochs", "2", "--steps", "3")
    for rank, out in enumerate(result):
        # Each step: the shards as topk:0.05 sends them, the vectors whole, and GraVAC's
        # own sums (4 doubles) and step time (1 double) over the world.
        assert [e["floats"] for e in out["epochs"]] == [e["floats"] + 3 * 10 for e in fixed[rank]["epochs"]], rank
        assert out["shared"] == ["gravac/inputs"] and "fc1.weight/error" in out["saved"]


@needs_fsdp2
def test_compress_fsdp_on_cuda_over_nccl(tmp_path):
    # One rank per GPU (fsdp_cuda.py: the layout and the checks); where torch sees no GPU
    # it skips here, and scripts/gpu/run-all.sh runs it on a GPU machine.
    import fsdp_cuda
    reason = fsdp_cuda.unavailable()
    if reason:
        pytest.skip(reason)
    assert fsdp_cuda.failures(tmp_path) == []


PREFIX = "UsageError: "
SOURCES = ("compress_fsdp: give one of compress (a compressor spec such as 'powersgd:2'), schedule (a compression "
           "schedule from regime-detect), accordion=True (decided online), gravac (a compressor family such as "
           "'topk', decided every step) or auto=True (levels chosen by predicted step time), ")
EXAMPLE = ("(e.g. mesh = init_device_mesh('cpu', (2, 2), mesh_dim_names=('replicate', 'shard')), "
           "fully_shard(module, mesh=mesh['shard']) and replicate_group=mesh['replicate'])")


@needs_fsdp2
def test_what_compress_fsdp_refuses(tmp_path):
    ranks = run_ranks(["refusals"], cwd=tmp_path, world=4, worker=WORKER)
    assert ranks.codes == [0] * 4, ranks.describe()
    messages = json.loads(ranks.stdout(0))
    expected = {
        "no replica group": "replicate_group: missing; compress_fsdp exchanges each gradient shard across the "
                            "replicas over the replica dimension of the mesh the model is sharded on " + EXAMPLE,
        "the shard group as replica group": "replicate_group: ranks [0, 1] hold several shards of this rank's "
                                            "replica (its shard group is ranks [0, 1]); the replica group joins one "
                                            "rank of each replica " + EXAMPLE,
        "a replica group across shard indices": "replicate_group: rank 3 holds shard 1 of 2, this rank (0) shard 0 "
                                                "of 2; the replica group joins the ranks of one shard index " + EXAMPLE,
        "a replica group short of the world": "replicate_group: its 1 ranks times the shard group's 2 make 2, not "
                                              "the world's 4 ranks; the replica group spans the mesh's replica "
                                              "dimension " + EXAMPLE,
        "a 2-D mesh as replica group": "replicate_group: a 2-D mesh; give its replica dimension alone " + EXAMPLE,
        "native hybrid sharding": "model: module 'fc1' is sharded over a 2-D mesh, FSDP's own hybrid sharding, "
                                  "which already all-reduces the shards across the replicas; shard it over the "
                                  "shard dimension alone for compress_fsdp to exchange them " + EXAMPLE,
        "FSDP1": "model: the root module is FullyShardedDataParallel (FSDP1); compress_fsdp exchanges the shards in "
                 "FSDP2's per-module all-reduce hook: shard it with fully_shard(module, mesh=mesh['shard']) instead",
        "no fully_shard": "model: compress_fsdp exchanges the gradient shards of FSDP2's fully_shard; give it the "
                          "model after fully_shard(module, mesh=mesh['shard']), not a Net without sharded parameters",
        "neither compress nor schedule": SOURCES + "not none of them",
        "gravac and compress": SOURCES + "not compress and gravac",
        "auto and accordion": SOURCES + "not accordion and auto",
        "levels without auto": "levels: belongs to the automatic mode; give it with auto=True",
        "one_exchange not a bool": "one_exchange: must be True or False, not 'yes'",
        "gravac: a shard without rows": "model: shard 1 of 2 holds no rows of any trainable parameter; GraVAC "
                                        "decides every step from every rank's shards, so compress_fsdp(gravac=...) "
                                        "needs each shard to hold some (shard the model over fewer ranks)",
        # Refused at the end of the step's backward pass.
        "gravac: a module without gradients": "model: module 'unused' reduced no gradients in this step; GraVAC "
                                              "decides once per step from every module's shards, so "
                                              "compress_fsdp(gravac=...) needs every FSDP module with trainable "
                                              "parameters to reduce its gradients in every step",
        "a state of another replica": "state_dict: saved by rank 1 of 2, loaded on rank 0 of 2; each rank's error "
                                      "memories are its own, so a state loads only on the rank that saved it (give "
                                      "each rank its own state_dict)",
        "rows sharded on dimension 1": "model: module 'fc1' shards its parameter 'weight' on dimension 1 "
                                       "(shard_placement_fn); compress_fsdp takes shards of rows, fully_shard's "
                                       "default dimension 0",
        "an all-reduce hook of the user's": "model: module 'fc2' already has an all-reduce hook "
                                            "(set_all_reduce_hook); FSDP runs one per module, and compress_fsdp's "
                                            "is the replica exchange",
        "CPU offload": "model: module 'fc1' offloads its parameters to the CPU (CPUOffloadPolicy), which "
                       "compress_fsdp does not support yet; shard it without offload_policy",
        "a parameter outside fully_shard": "model: parameter 'fc3.weight' is not sharded by fully_shard (no FSDP "
                                           "module manages it), so no replica exchange would reach it; apply "
                                           "fully_shard to the model's root module too",
        "a state of another shard": "state_dict: saved by shard 1 of 2, loaded on shard 0 of 2; each shard's "
                                    "error memories are its own, so a state loads only on the shard and replica "
                                    "that saved it",
        "a state without its shard": "state_dict: names no shard (shard_rank, shard_world_size); it is not a "
                                     "compress_fsdp state's state_dict()",
        # Refused in the step, when FSDP hands over a module's shards without it.
        "a parameter without gradient": "model: the root module reduced 26 gradient values, not the 28 of its "
                                        "parameters' shards: a parameter got no gradient this step; compress_fsdp "
                                        "needs one for every trainable parameter of a module in every step",
    }
    for case, message in expected.items():
        assert messages.pop(case) == PREFIX + message, case
    assert messages.pop("a bad spec").startswith(PREFIX + "compress: 'zip:3' is not a compressor spec; one of none")
    assert messages.pop("auto: an unknown level").startswith(PREFIX + "levels: 'zip:3' is not a compressor spec; ")
    recorder = {
        "FSDP1": "model: the root module is FullyShardedDataParallel (FSDP1); GradientRecorder reads the local "
                 "gradients at the input of FSDP2's per-module reduce-scatter: shard it with fully_shard(module) "
                 "instead",
        "no fully_shard": "model: GradientRecorder records inside DistributedDataParallel's communication hook or at "
                          "FSDP2's reduce-scatter; give it the model wrapped in "
                          "torch.nn.parallel.DistributedDataParallel (one process works too) or sharded with "
                          "fully_shard, not a Net",
        "a parameter outside fully_shard": "model: parameter 'fc3.weight' is not sharded by fully_shard (no FSDP "
                                           "module manages it), so no reduce-scatter hands the recorder its "
                                           "gradient; apply fully_shard to the model's root module too",
        "a DDP hook": "hook: DDP's communication hook, which FSDP2 has none of; under fully_shard the recorder reads "
                      "the reduce-scatter's input and leaves the exchange to FSDP (or compress_fsdp, made beside "
                      "it): leave hook and hook_state out",
        "rows sharded on dimension 1": "model: module 'fc1' shards its parameter 'weight' on dimension 1 "
                                       "(shard_placement_fn); GradientRecorder takes shards of rows, fully_shard's "
                                       "default dimension 0",
        "one rank per shard": "model: sharded over one rank (its shard group), where FSDP has no reduce-scatter "
                              "whose input the recorder reads; shard it over two or more ranks, or record under "
                              "DistributedDataParallel",
        "a record_rank outside the world": "record_rank: must be a rank of the world (every rank trains the sharded "
                                           "model), 0 to 3, not 4",
        # Refused in the step, on every rank, at the reduce-scatter's input (2 shards
        # of 28 values each, fc's 4 x 12 and 4, spare's 3 padded to 2 + 2 rows).
        "a parameter without gradient": "model: the root module reduce-scattered 52 gradient values, not the 56 of "
                                        "its parameters: a parameter got no gradient this step; GradientRecorder "
                                        "needs one for every trainable parameter of a module in every step",
    }
    for case, message in recorder.items():
        assert messages.pop(f"recorder: {case}") == PREFIX + message, case
    assert not messages, f"cases without an expected message: {sorted(messages)}"


@pytest.mark.skipif(HAS_FSDP2, reason="this torch has FSDP2")
def test_an_old_torch_is_told_fsdp2_is_needed():
    with pytest.raises(accordion.UsageError, match=r"^compress_fsdp: needs PyTorch 2\.x with FSDP2 "
                                                   r"\(torch\.distributed\.fsdp\.fully_shard\); this is torch 1\."):
        accordion.compress_fsdp(torch.nn.Linear(2, 2), None, "none")


EXAMPLE_SCRIPT = os.path.join(TREE, "examples", "pytorch", "train_fsdp.py")


def run_example(tmp_path, *arguments):
    """examples/pytorch/train_fsdp.py under torchrun on 4 ranks: rank 0's lines."""
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port",
                           str(free_port()), EXAMPLE_SCRIPT, "--epochs", "2", "--train-samples", "4096",
                           "--test-samples", "500", *arguments], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=RUN_SECONDS)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith("epoch ")]


@needs_fsdp2
@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="the example reads Debian's dataset-fashion-mnist")
def test_the_example_trains_as_native_hybrid_sharding(tmp_path):
    # 2 epochs of 16 steps on 4 ranks. Per step, rank 0 sends at powersgd:4 for its
    # shards fc1 128x784, fc2 128x256 and fc3 5x256 (sent whole: rank 4 would not
    # halve it) and the biases 128, 128 and 5: 3648 + 1536 + 1280 + 261 floats.
    ours, native = run_example(tmp_path, "--compress", "powersgd:4"), run_example(tmp_path)
    assert len(ours) == len(native) == 2
    for line in ours:
        assert f", sent {16 * (3648 + 1536 + 1280 + 261):.4g} floats, " in line, line
    # The final test accuracies (500 images): both learn, within 5 points (seen: 74.4% and 76.0%).
    final = [float(lines[-1].split("test accuracy ")[1].split("%")[0]) for lines in (ours, native)]
    assert min(final) > 65 and abs(final[0] - final[1]) < 5, (ours, native)


@needs_fsdp2
def test_the_example_refuses_one_exchange_without_compression(tmp_path):
    # Without a compressed exchange the example trains FSDP's own hybrid sharding,
    # which --one-exchange would not change: a usage error before any rank starts.
    done = subprocess.run([sys.executable, EXAMPLE_SCRIPT, "--one-exchange"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=RUN_SECONDS)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == ("train_fsdp.py: error: --one-exchange: belongs to the compressed replica "
                                            "exchange; give it with --compress, --schedule, --accordion or --auto")


PIPELINE = os.path.join(TREE, "examples", "pytorch", "record-and-detect-fsdp.sh")


@needs_fsdp2
@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="the example reads Debian's dataset-fashion-mnist")
def test_the_example_records_detects_and_replays(tmp_path, programs):
    # record-and-detect-fsdp.sh, shortened to 4 epochs of 8 steps: the recording
    # names the unsharded MLP's parameters, and the replay follows the schedule.
    env = dict(os.environ, PYTHON=sys.executable, EPOCHS="4", SAMPLES="2048", ACC_PORT=str(free_port()),
               OMP_NUM_THREADS="1", ACC_BUILD_DIR=os.path.relpath(os.path.dirname(programs), TREE))
    done = subprocess.run(["bash", PIPELINE, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=3 * RUN_SECONDS)
    assert done.returncode == 0, done.stderr[-3000:]
    mlp = {"fc1.weight": (256, 784), "fc1.bias": (256,), "fc2.weight": (256, 256), "fc2.bias": (256,),
           "fc3.weight": (10, 256), "fc3.bias": (10,)}
    for recording in ("grads.h5", "compressed.h5"):
        names, shapes, norms, complete, world = read_norms(tmp_path / recording)
        assert names == list(mlp) and dict(zip(names, shapes)) == mlp, recording
        assert (complete, world, norms.shape) == (1, 4, (4, 6)) and np.all(norms > 0), recording
    schedule = accordion.load_schedule(tmp_path / "sched.h5")
    replay = [line for line in done.stdout.splitlines() if line.startswith("epoch ") and ", sent " in line]
    assert len(replay) == 4 and schedule.epochs == 4, done.stdout
