"""The benchmarks' rules and the recipe they define per global batch: value specs, the schedule,
the hyperparameters of every published setup, and overrides."""

import math

import pytest

from dlbench.training import recipe
from dlbench.training.recipe import Hyperparameters, hyperparameters, lr_at, resolve

#: The global batches of the published Fashion-MNIST tables: -b 128..2048 on one GPU, and
#: 512 per GPU on 2 and 4 GPUs (1024 and 2048).
PUBLISHED = (128, 256, 512, 1024, 2048)


def test_value_specs_resolve_at_a_global_batch():
    assert resolve(0.9, 4096) == 0.9 and resolve("sgd", 1) == "sgd"
    assert resolve({"linear_in_global_batch": {"value": 0.1, "per": 256}}, 2048) == \
        pytest.approx(0.8)
    assert resolve({"sqrt_in_global_batch": {"value": 1e-3, "per": 128}}, 512) == \
        pytest.approx(2e-3)
    steps = {"by_global_batch": {"128": 0.5, "512": 1, "2048": 2}}
    assert [resolve(steps, b) for b in (64, 128, 256, 512, 1024, 2048, 8192)] == \
        [0.5, 0.5, 0.5, 1, 1, 2, 2]
    assert resolve({"range": [0, 1]}, 8) is None
    with pytest.raises(recipe.RulesError, match="unknown value spec"):
        resolve({"quadratic": {}}, 8)


def test_allows_exact_values_ranges_and_lists():
    lin = {"linear_in_global_batch": {"value": 0.1, "per": 256}}
    assert recipe.allows(lin, 0.4, 1024) and not recipe.allows(lin, 0.2, 1024)
    assert recipe.allows(lin, 0.4 * (1 + 1e-9), 1024)            # a decimal rendering
    assert recipe.allows(True, True, 8) and not recipe.allows(True, 1, 8)
    assert not recipe.allows(0.9, "0.9", 8) and not recipe.allows(0.9, math.nan, 8)
    assert recipe.allows({"range": [1, 3]}, 2, 8) and not recipe.allows({"range": [1, 3]}, 4, 8)
    assert recipe.allows({"one_of": ["bf16", "fp32"]}, "bf16", 8)
    assert not recipe.allows({"one_of": ["bf16", "fp32"]}, "fp16", 8)


def test_fashion_mnist_cnn10_is_defined_for_every_published_global_batch():
    bench = recipe.find("fashion-mnist", "cnn10")
    assert bench is not None and bench.target_accuracy == 0.9 and bench.max_epochs == 15
    assert "Goyal" in bench.source
    for b in PUBLISHED:
        hp = hyperparameters("fashion-mnist", "cnn10", "sgd", b, 15)
        assert hp.peak_lr == pytest.approx(0.1 * b / 256)           # linear scaling
        assert 0 < hp.warmup_epochs < hp.decay_epochs <= bench.max_epochs
        assert hp.optimizer == "sgd" and hp.momentum == 0.9 and hp.nesterov
        # every hyperparameter the run logs is the rules' at its global batch
        for key, value in hp.log_items("bf16"):
            assert recipe.allows(bench.hyperparameters[key], value, b), key
    # larger global batches take fewer steps per epoch: longer warm-up and decay, in epochs
    hps = [hyperparameters("fashion-mnist", "cnn10", "sgd", b, 15) for b in PUBLISHED]
    assert [h.decay_epochs for h in hps] == sorted(h.decay_epochs for h in hps)
    assert hps[-1].decay_epochs > hps[0].decay_epochs


def test_overrides_and_defaults():
    hp = hyperparameters("fashion-mnist", "cnn10", "sgd", 512, 15, lr=0.3, decay_epochs=0)
    assert hp.peak_lr == 0.3 and hp.decay_epochs == 0 and hp.warmup_epochs == 1
    # a benchmark the rules do not define: the defaults, decaying over the run's cap
    hp = hyperparameters("cifar10", "resnet18", "sgd", 256, 30)
    assert hp.peak_lr == pytest.approx(0.1) and hp.decay_epochs == 30
    hp = hyperparameters("fashion-mnist", "cnn10", "adamw", 512, 15)   # not the rules' optimizer
    assert hp.optimizer == "adamw" and hp.peak_lr == pytest.approx(2e-3) and not hp.nesterov
    with pytest.raises(recipe.RulesError, match="--decay-epochs"):
        hyperparameters("fashion-mnist", "cnn10", "sgd", 512, 15, warmup_epochs=8)


def test_the_schedule_warms_up_linearly_then_decays_to_zero():
    hp = Hyperparameters("sgd", 0.8, 0.9, True, 5e-4, warmup_epochs=2, decay_epochs=10)
    spe = 30                                                       # steps per epoch
    lrs = [lr_at(hp, s, spe) for s in range(12 * spe)]
    assert lrs[0] == pytest.approx(0.8 / 60) and lrs[59] == pytest.approx(0.8)
    assert all(b > a for a, b in zip(lrs[:59], lrs[1:60]))           # rising in the warm-up
    assert lrs[60] == pytest.approx(0.8)                               # the peak, then a cosine
    assert lrs[60 + 120] == pytest.approx(0.4)                         # half way: half the peak
    assert all(b <= a for a, b in zip(lrs[60:300], lrs[61:300]))
    assert lrs[299] < 1e-3 and lrs[300] == 0.0 == lrs[-1]
    const = Hyperparameters("sgd", 0.1, 0.9, True, 5e-4, warmup_epochs=1, decay_epochs=0)
    assert lr_at(const, 5, 10) == pytest.approx(0.06) and lr_at(const, 500, 10) == 0.1


def test_the_rules_file_is_plain_json_with_a_source_for_every_benchmark():
    rules = recipe.load_rules()
    for name, b in rules["benchmarks"].items():
        assert name == recipe.benchmark_name(b["dataset"], b["model"])
        assert 0 < b["target_accuracy"] <= 1 and b["max_epochs"] >= 1 and b["recipe_source"]
        assert set(b["hyperparameters"]) == set(recipe.HP_KEYS)
