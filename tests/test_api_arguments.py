"""`ets.search` and `ets.search_with` refuse arguments that cannot work before anything
loads: a concurrency below 1 (which would search nothing and return no records), a
callback or progress bar that is none (which would fail after the first problem's
search), a policy that is not one. Each is one `ets.ConfigError` naming the argument."""

import pytest

import ets
from tests.helpers import TINY


@pytest.mark.parametrize("argument, words", [
    ({"concurrency": 0}, "concurrency=0 must be an int >= 1"),
    ({"concurrency": -1}, "concurrency=-1 must be an int >= 1"),
    ({"concurrency": "2"}, "concurrency='2' must be an int >= 1"),
    ({"concurrency": True}, "concurrency=True must be an int >= 1"),
    ({"on_result": 5}, "on_result=5 must be a function"),
    ({"progress": 5}, "progress=5 must have an update(n) method"),
    ({"policy": "/models/policy"}, "policy='/models/policy' is not an ets Policy"),
])
@pytest.mark.parametrize("function", ["search", "search_with"])
def test_an_argument_that_cannot_work_is_refused_before_any_model_loads(function, argument, words, monkeypatch):
    monkeypatch.setattr("ets.api.build_policy", lambda config: pytest.fail("a model was loaded"))
    with pytest.raises(ets.ConfigError) as raised:
        if function == "search":
            ets.search(TINY, ["What is 1 + 1?"], **argument)
        else:
            kwargs = {"policy": object(), **argument}
            ets.search_with(["What is 1 + 1?"], kwargs.pop("policy"), lambda q, t: [[[0.5] * len(s) for s in ts] for ts in t],
                            **kwargs)
    assert str(raised.value).startswith(f"{function}: {words}") and "\n" not in str(raised.value)


def test_a_model_that_cannot_be_loaded_is_an_ets_error(tmp_path):
    with pytest.raises(ets.ModelLoadError, match="unknown tiny model 'tiny:nosucharch'"):
        ets.build_policy(ets.load_config(TINY, ["policy.model=tiny:nosucharch"]))
