"""Specification of training, evaluation, checkpoints and the train/evaluate/decode commands.

These runs are tiny (a few steps): they check behaviour, not accuracy. The accuracy
targets are shown by `make bench` (course_lib/bench_models.py).
"""

import itertools
import subprocess
import sys
from unittest import mock

import pytest
import torch

import course_lib.training as training
from course_lib.decoding import greedy_decode
from course_lib.training import (
    _DEFAULTS,
    _lr_factor,
    benchmark,
    cache_key,
    default_config,
    evaluate,
    load_checkpoint,
    resolve_device,
    train,
)

TINY = dict(steps=6, batch_size=16, warmup=2)


def tiny(task="reverse", model="transformer", seed=0, **kw):
    config = default_config(task, model, seed=seed, **{**TINY, **kw})
    if model == "transformer":
        config.model_kwargs = dict(
            d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, dropout=0.1, max_len=40
        )
    else:
        config.model_kwargs = dict(embed_dim=8, hidden_dim=16)
    return config


@pytest.mark.parametrize("model", ["transformer", "bahdanau"])
def test_same_seed_gives_same_weights_and_metrics(model, monkeypatch):
    monkeypatch.setattr("course_lib.training.evaluate", lambda m, t, n, seed: evaluate(m, t, n=50, seed=seed))
    a_model, _, a = train(tiny(model=model), progress=False)
    b_model, _, b = train(tiny(model=model), progress=False)
    assert a["final_loss"] == b["final_loss"] and a["test_exact_accuracy"] == b["test_exact_accuracy"]
    for (name, p), q in zip(a_model.state_dict().items(), b_model.state_dict().values(), strict=False):
        assert torch.equal(p, q), name
    _c_model, _, c = train(tiny(model=model, seed=1), progress=False)
    assert c["final_loss"] != a["final_loss"]


def test_training_lowers_the_loss():
    _, _, short = train(tiny(steps=2), progress=False)
    _, _, longer = train(tiny(steps=60, batch_size=32), progress=False)
    assert longer["final_loss"] < short["final_loss"]


@pytest.mark.parametrize(
    ("task", "model", "steps"), [("reverse", "transformer", 40), ("dates", "bahdanau", 30), ("dates", "luong", 40)]
)
def test_every_default_recipe_lowers_the_loss_on_every_seed_tried(task, model, steps, monkeypatch):
    # the recipes themselves, cut short: the accuracy over seeds is benchmarks/models.py's to show
    monkeypatch.setattr("course_lib.training.evaluate", lambda m, t, n, seed: evaluate(m, t, n=20, seed=seed))
    for seed in (0, 1, 2):
        first = train(default_config(task, model, seed=seed, steps=1), progress=False, threads=1)[2]["final_loss"]
        later = train(default_config(task, model, seed=seed, steps=steps), progress=False, threads=1)[2]["final_loss"]
        assert later < 0.8 * first, (seed, first, later)


def test_checkpoint_round_trip_gives_the_same_outputs(tmp_path):
    model, task, metrics = train(tiny(task="dates", model="luong"), out=tmp_path / "m.pt", progress=False)
    loaded, loaded_task, ckpt = load_checkpoint(tmp_path / "m.pt")
    assert ckpt["metrics"] == metrics and loaded_task.name == "dates"
    src, _, _ = task.batch(task.examples("test", 5, seed=0))
    assert torch.equal(greedy_decode(model.eval(), src, 11), greedy_decode(loaded, src, 11))


def test_cache_dir_trains_once_then_loads_the_same_model(tmp_path, monkeypatch):
    monkeypatch.setattr("course_lib.training.evaluate", lambda m, t, n, seed: evaluate(m, t, n=20, seed=seed))
    config = tiny(task="dates", model="bahdanau")
    model, task, metrics = train(config, progress=False, cache_dir=tmp_path)
    saved = list(tmp_path.glob("*.pt"))
    assert len(saved) == 1 and not list(tmp_path.glob(".*"))  # no temporary file left behind

    def no_training(*args, **kwargs):
        raise AssertionError("a cache hit must not train")

    with monkeypatch.context() as m:
        m.setattr("course_lib.training._train", no_training)
        again, again_task, again_metrics = train(
            config, progress=False, cache_dir=tmp_path, out=tmp_path / "copy" / "m.pt"
        )
    assert again_metrics == metrics and again_task.name == task.name and not again.training
    assert model.state_dict().keys() == again.state_dict().keys()
    for (name, p), q in zip(model.state_dict().items(), again.state_dict().values(), strict=False):
        assert torch.equal(p, q), name
    assert load_checkpoint(tmp_path / "copy" / "m.pt")[2]["metrics"] == metrics  # out= is still written

    train(tiny(task="dates", model="bahdanau", steps=7), progress=False, cache_dir=tmp_path)  # a miss
    assert len(list(tmp_path.glob("*.pt"))) == 2


def test_cache_key_covers_config_threads_and_source(monkeypatch):
    config = tiny()
    key = cache_key(config, threads=2)
    assert cache_key(tiny(), threads=2) == key
    for other in (tiny(seed=1), tiny(lr=1e-2), tiny(task_kwargs={"max_len": 8})):
        assert cache_key(other, threads=2) != key
    changed = tiny()
    changed.model_kwargs["d_model"] = 32
    assert cache_key(changed, threads=2) != key
    assert cache_key(config, threads=1) != key
    monkeypatch.setattr("course_lib.training._source_hash", lambda: "edited")
    assert cache_key(config, threads=2) != key


def test_a_damaged_cache_file_is_trained_again(tmp_path, monkeypatch):
    monkeypatch.setattr("course_lib.training.evaluate", lambda m, t, n, seed: evaluate(m, t, n=20, seed=seed))
    config = tiny()
    _, _, metrics = train(config, progress=False, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.pt")
    path.write_bytes(path.read_bytes()[:100])
    _, _, again = train(config, progress=False, cache_dir=tmp_path)
    assert again["final_loss"] == metrics["final_loss"]
    assert load_checkpoint(path)[2]["metrics"] == again  # rewritten whole


def test_evaluate_counts_exact_matches_only():
    class Oracle(torch.nn.Module):
        """Answers every reverse question right except sequences starting with '7'."""

        def start(self, src, use_cache=True):
            return {"src": src, "t": 0}

        def next_log_probs(self, state, y_prev):
            src, t = state["src"], state["t"]
            lengths = (src > 2).sum(1)
            out = torch.full((src.shape[0], 13), -1e9)
            for i in range(src.shape[0]):
                token = src[i, lengths[i] - 1 - t] if t < lengths[i] else 2  # reversed, then <eos>
                if src[i, 0] == task.src_vocab.encode(["7"])[0]:
                    token = 2  # give up at once
                out[i, token] = 0.0
            return out, {"src": src, "t": t + 1}, torch.zeros(src.shape[0], src.shape[1])

    from course_lib.tasks import get_task

    task = get_task("reverse")
    examples = task.examples("test", 200, seed=0)
    expected = sum(src[0] != "7" for src, _ in examples) / 200
    assert evaluate(Oracle(), task, n=200, seed=0) == pytest.approx(expected)
    assert 0.8 < expected < 1.0


def test_learning_rate_warms_up_then_decays_to_zero():
    factors = [_lr_factor(s, warmup=10, total=100) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[9:]))
    assert factors[-1] < 0.001


def test_learning_rate_decays_to_its_floor_and_stays_there_after_the_decay():
    factors = [_lr_factor(s, warmup=10, total=100, floor=0.02) for s in range(150)]
    assert factors[:90] == [_lr_factor(s, warmup=10, total=100) for s in range(90)]  # the floor is not reached yet
    assert all(a >= b for a, b in itertools.pairwise(factors[9:]))
    assert factors[100:] == [0.02] * 50
    assert min(factors) == 0.02


def test_training_runs_past_the_decay_at_the_floor_learning_rate():
    seen = []
    config = tiny(steps=6, warmup=1, decay_steps=3, lr_floor=0.5, lr=1e-2)
    real = torch.optim.lr_scheduler.LambdaLR.step

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(self.optimizer.param_groups[0]["lr"])

    with mock.patch.object(torch.optim.lr_scheduler.LambdaLR, "step", spy):
        _, _, metrics = train(config, progress=False, threads=1)
    assert metrics["steps"] == 6
    assert seen[-3:] == [pytest.approx(5e-3)] * 3  # steps 3, 4, 5 after the decay: the floor


def test_default_config_copies_the_defaults():
    config = default_config("reverse", "transformer")
    config.model_kwargs["d_model"] = 8
    assert default_config("reverse", "transformer").model_kwargs == _DEFAULTS["transformer"]["model_kwargs"]
    assert _DEFAULTS["transformer"]["model_kwargs"]["d_model"] != 8


def test_a_recipes_length_weighting_applies_to_the_sequence_tasks_only():
    assert default_config("reverse", "transformer").length_power == _DEFAULTS["transformer"]["length_power"] > 0
    assert default_config("dates", "transformer").length_power == 0.0  # dates have no lengths to weigh
    with pytest.raises(ValueError, match="length_power applies to the sequence tasks only"):
        train(default_config("dates", "transformer", length_power=0.5, steps=1), progress=False, threads=1)


def test_training_stops_at_the_first_step_that_ends_enough_exact_batches_in_a_row(monkeypatch):
    # every training batch's exactness as the loss sees it: all tokens right or padding
    exact: list[bool] = []
    loss_fn = training.label_smoothing_loss

    def spy(logits, target, smoothing, ignore_index):
        right = (logits.argmax(-1) == target) | (target == ignore_index)
        exact.append(bool(right.all()))
        return loss_fn(logits, target, smoothing, ignore_index=ignore_index)

    monkeypatch.setattr(training, "label_smoothing_loss", spy)
    monkeypatch.setattr(training, "evaluate", lambda m, t, n, seed: evaluate(m, t, n=20, seed=seed))
    easy = dict(model="bahdanau", steps=300, batch_size=16, task_kwargs=dict(max_len=2))
    _, _, metrics = train(tiny(**easy, stop_after_exact=3), progress=False, threads=1)
    runs = [all(exact[i - 3 : i]) for i in range(3, len(exact) + 1)]
    assert metrics["steps"] == len(exact) < 300  # it stopped early...
    assert runs[-1] and not any(runs[:-1])  # ...at the first step that ended three exact batches
    exact.clear()
    _, _, always = train(tiny(**easy, stop_after_exact=0), progress=False, threads=1)  # no rule: every step
    assert always["steps"] == len(exact) == 300 and sum(exact) > 3


def test_benchmark_returns_the_numbers_make_bench_prints():
    tiny_model = tiny().model_kwargs
    result = benchmark(
        "reverse", "transformer", n=30, threads=1, steps=4, batch_size=8, warmup=2, model_kwargs=tiny_model
    )
    assert result["steps"] == 4 and result["threads"] == 1 and result["batch_size"] == 8
    assert result["train_seconds"] > 0 and result["train_cpu_seconds"] > 0 and len(result["load_average"]) == 2
    for key in ("test_exact_accuracy", "fresh_exact_accuracy"):
        assert 0 <= result[key] <= 1 and result[key] * 30 == round(result[key] * 30)
    with pytest.raises(ValueError, match="fresh_seed must differ"):
        benchmark("reverse", "transformer", seed=1, fresh_seed=1)


def test_unknown_model_or_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        default_config("reverse", "gpt")
    with pytest.raises(ValueError, match="unknown task 'french'"):
        default_config("french", "transformer")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "course_lib", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess that imports torch
def test_cli_train_evaluate_decode(tmp_path):
    ckpt = tmp_path / "rev.pt"
    result = run_cli("train", "reverse", "--model", "transformer", "--steps", "3", "--seed", "2", "--out", str(ckpt))
    assert result.returncode == 0, result.stderr
    assert "held-out exact-sequence accuracy:" in result.stdout and ckpt.is_file()
    assert "reverse" in result.stderr  # the tqdm progress bar
    result = run_cli("evaluate", str(ckpt), "--n", "20", "--seed", "5")
    assert result.returncode == 0, result.stderr
    assert "on 20 fresh reverse test sequences (seed 5)" in result.stdout
    for extra in ([], ["--beam", "3"]):
        result = run_cli("decode", str(ckpt), "3 1 4 1 5", *extra)
        assert result.returncode == 0, result.stderr
        assert all(tok.isdigit() for tok in result.stdout.split())
    result = run_cli("decode", str(ckpt), "3 x 4")
    assert result.returncode == 2 and "cannot read '3 x 4' as reverse input" in result.stderr


@pytest.mark.slow  # a subprocess that imports torch
def test_cli_rejects_an_unknown_task():
    result = run_cli("train", "french")
    assert result.returncode == 2 and "invalid choice: 'french'" in result.stderr


# -- any device: the plumbing, tested on the CPU (the meta device stands in for another) --------


def test_auto_is_cuda_when_available_else_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


def test_a_device_the_machine_lacks_or_no_device_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="argument 'device' is 'cuda', which this machine does not have"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="argument 'device' must be one of auto, cpu, cuda, mps, got 'gpu'"):
        resolve_device("gpu")
    with pytest.raises(TypeError, match=r"argument 'device' must be a str or torch\.device, got int"):
        resolve_device(0)


def test_training_on_the_cpu_device_is_bit_identical_to_training_without_it():
    config = default_config("reverse", "transformer", seed=3, steps=4)
    plain, _, m1 = train(config, progress=False, threads=1)
    placed, _, m2 = train(config, progress=False, threads=1, device="cpu")
    for (name, a), (_, b) in zip(plain.state_dict().items(), placed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert m1["final_loss"] == m2["final_loss"] and m1["test_exact_accuracy"] == m2["test_exact_accuracy"]


def test_a_checkpoint_loads_onto_another_device(tmp_path):
    config = default_config("reverse", "transformer", seed=1, steps=2)
    model, _, _ = train(config, out=tmp_path / "m.pt", progress=False, threads=1)
    moved, _, _ = load_checkpoint(tmp_path / "m.pt", device="meta")
    assert {p.device.type for p in moved.parameters()} == {"meta"}
    assert [p.shape for p in moved.parameters()] == [p.shape for p in model.parameters()]


def test_the_cache_key_tells_devices_apart_and_leaves_the_cpus_as_it_was():
    config = default_config("reverse", "transformer", seed=1)
    assert cache_key(config, 1, "cpu") == cache_key(config, 1)
    assert cache_key(config, 1, "meta") != cache_key(config, 1)


@pytest.mark.slow  # a subprocess that imports torch
def test_cli_refuses_a_device_the_machine_lacks(tmp_path):
    lacking = "mps" if torch.cuda.is_available() else "cuda"  # no machine has both
    result = run_cli("train", "reverse", "--steps", "1", "--device", lacking, "--out", str(tmp_path / "x.pt"))
    assert result.returncode == 2 and "which this machine does not have" in result.stderr
