"""dlbench.launch.agent: torchrun's agent with the rendezvous' method names read from frames."""

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from dlbench.launch import agent

TORCHS = dynamic_rendezvous.get_method_name  # imported before any test replaces it


def _named(depth: int, fn) -> tuple[str, str]:
    # nested calls, so that every depth names a different function
    def event():
        return fn(depth), agent.caller_name(depth)

    def record():
        return event()

    def rendezvous_step():
        return record()
    return rendezvous_step()


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_caller_name_is_what_torchs_get_method_name_returns(depth):
    theirs, ours = _named(depth, TORCHS)
    assert ours == theirs
    assert ours == {1: "event", 2: "record", 3: "rendezvous_step", 4: "_named"}[depth]


def test_past_the_outermost_frame_is_no_method_name():
    assert agent.caller_name(10_000) == TORCHS(10_000) == "no_method_name"


def test_the_agent_uses_it_for_the_rendezvous(monkeypatch):
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", TORCHS)
    agent.quick_method_names()
    assert dynamic_rendezvous.get_method_name is agent.caller_name
