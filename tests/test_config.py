import pytest

from ets.config import ConfigError, RunConfig, SearchConfig, config_from_dict, load_config


def test_defaults_follow_public_code():
    c = SearchConfig()
    assert (c.width, c.softmax_temperature, c.max_step_tokens, c.max_tokens, c.max_depth) == (16, 0.2, 256, 1024, 25)


def test_ets_public_keys_are_accepted(tmp_path):
    path = tmp_path / "hp.yaml"
    path.write_text(
        "width: 64\ntemperature: 1.0\nmax_step_tokens: 256\nmax_tokens: 1024\n"
        "select_method: softmax_costmodel\nsoftmax_temperature: 0.2\nlambdac: 1.0\nlambdas: 1.4\nfixedwidth: -1\n"
    )
    c = load_config(path)
    assert c.search.method == "ets" and c.search.width == 64
    assert c.search.lambda_s == 1.4 and c.search.fixed_width is None
    assert load_config(path, ["select_method=beam_search"]).search.method == "beam"
    assert load_config(path, ["select_method=softmax", "fixedwidth=4"]).search.fixed_width == 4


def test_overrides_reach_every_section(tmp_path):
    c = load_config(None, ["width=8", "policy.backend=hf", "data.limit=3", "reward.options.tag=' ки'", "concurrency=2"])
    assert isinstance(c, RunConfig)
    assert (c.search.width, c.policy.backend, c.data.limit, c.concurrency) == (8, "hf", 3, 2)
    assert c.reward.options == {"tag": " ки"}


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"widht": 3}, ["'widht'", "width"]),
        ({"width": 0}, ["width", ">= 1"]),
        ({"search": {"vote": "all"}}, ["vote", "weighted", "majority"]),
        ({"policy": {"backend": "sglang"}}, ["policy.backend", "engine", "hf", "vllm"]),
        ({"policy": {"backend": "vllm", "vllm": {"tensor_paralel_size": 2}}}, ["policy.vllm.tensor_paralel_size",
                                                                              "tensor_parallel_size"]),
        ({"policy": {"backend": "vllm", "vllm": {"block_size": "32"}}}, ["policy.vllm.block_size", "int"]),
        ({"policy": {"vllm": {"block_size": 32}}}, ["policy.vllm", "policy.backend=vllm"]),
        ({"policy": {"nope": 1}}, ["'policy.nope'", "model"]),
        ({"data": {"format": "fields"}}, ["question_field"]),
        ({"search": {"cost": "bytes"}}, ["cost", "uniform", "tokens"]),
    ],
)
def test_bad_values_name_the_key_and_the_allowed(raw, words):
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    for w in words:
        assert w in str(err.value)


@pytest.mark.parametrize(
    "raw, hint",
    [
        ({"widht": 3}, "(did you mean 'width'?)"),
        ({"lamda_c": 2}, "(did you mean 'lambda_c'?)"),
        ({"search": {"widht": 3}}, "(did you mean 'search.width'?)"),
        ({"policy": {"modle": "x"}}, "(did you mean 'policy.model'?)"),
        ({"model": "x"}, "(did you mean 'policy.model' or 'reward.model'?)"),   # a section's key, flat
        ({"device": "cpu"}, "(did you mean 'policy.device'?)"),
        ({"policy": {"backend": "vllm", "vllm": {"tensor_paralel_size": 2}}}, "(did you mean 'tensor_parallel_size'?)"),
        ({"aggregation": "lats"}, "(did you mean 'last'?)"),
        ({"policy_model_type": "llema"}, "(did you mean 'llemma'?)"),
        ({"foo": 1}, None),                                                      # nothing close: no guess
    ],
)
def test_a_mistyped_name_gets_the_closest_known_one(raw, hint):
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    assert (hint in str(err.value)) if hint else ("did you mean" not in str(err.value))


def test_a_mistyped_method_or_reward_gets_the_closest_known_one():
    import ets.strategies as search
    from ets.rewards.registry import resolve_reward

    with pytest.raises(ConfigError, match=r"'rebsae' \(did you mean 'rebase'\?\)"):
        search.build(config_from_dict({"method": "rebsae"}).search)
    with pytest.raises(ConfigError, match=r"'stepp_tag' \(did you mean 'step_tag'\?\)"):
        resolve_reward("stepp_tag")


@pytest.mark.parametrize("raw, first, second", [
    ({"width": 4, "search": {"width": 8}}, "search.width", "width"),
    ({"search": {"width": 8}, "width": 4}, "search.width", "width"),
    ({"lambdac": 1, "lambda_c": 2}, "lambdac", "lambda_c"),
    ({"search": {"fixedwidth": 2}, "fixed_width": 3}, "search.fixedwidth", "fixed_width"),
])
def test_a_search_key_given_twice_in_a_config_is_refused(raw, first, second):
    """The two would have been applied in file order, the later silently winning."""
    with pytest.raises(ConfigError, match=f"{first} and {second} both set the search key"):
        config_from_dict(raw)


@pytest.mark.parametrize("raw", [{"width": 4, "search": {"method": "ets"}}, {"search": {"method": "ets"}, "width": 4},
                                 {"search": {"width": 4}}, {"fixedwidth": 4}])
@pytest.mark.parametrize("override", ["width=8", "search.width=8"])
def test_an_override_wins_wherever_the_config_has_the_key(raw, override):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    config = config_from_dict(raw, [override, override.replace("width", "fixed_width")])
    assert (config.search.width, config.search.fixed_width) == (8, 8)
    assert config_from_dict({"width": 4}, ["width=8", "search.width=6"]).search.width == 6  # the later override


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("width: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["width"])


def test_an_unknown_method_is_named_with_the_registered_ones():
    """The strategy registry is the one list of methods: the config only resolves the ETS
    aliases, and building the strategy names the known ones (in table order)."""
    import ets.strategies as search

    config = config_from_dict({"select_method": "foo"}).search
    with pytest.raises(ConfigError, match=r"unknown search strategy 'foo'; known: best_of_n, beam, dvts, rebase, ets"):
        search.build(config)
    assert config_from_dict({"select_method": "softmax_costmodel"}).search.method == "ets"


def test_compat_and_answer_markers_are_checked():
    assert SearchConfig().compat == "project" and not SearchConfig().ets_code
    assert SearchConfig(compat="ets_code").ets_code
    assert SearchConfig().answer_markers == ["The answer is", "The final answer is", "Therefore, the final answer is"]
    assert config_from_dict({"search": {"answer_markers": "####"}}).search.answer_markers == ["####"]
    assert config_from_dict({"answer_markers": []}).search.answer_markers == []
    with pytest.raises(ConfigError, match=r"compat: 'ets'.*project, ets_code"):
        config_from_dict({"compat": "ets"})
    with pytest.raises(ConfigError, match="answer_markers"):
        config_from_dict({"answer_markers": ["ok", ""]})


def test_answer_extraction_is_checked_and_put_in_precedence_order():
    from ets.config import ANSWER_RULES, MARKED_ANSWER_RULES

    assert SearchConfig().answer_extraction == list(ANSWER_RULES) == ["boxed", "marker", "hashes", "last_number"]
    # the ETS code reads no bare number: its compat mode leaves the fallback out
    assert SearchConfig(compat="ets_code").answer_extraction == list(MARKED_ANSWER_RULES)
    assert SearchConfig(compat="ets_code", answer_extraction=["last_number"]).answer_extraction == ["last_number"]
    assert config_from_dict({"answer_extraction": ["last_number", "boxed", "boxed"]}).search.answer_extraction == \
        ["boxed", "last_number"]
    assert config_from_dict({"search": {"answer_extraction": "marker"}}).search.answer_extraction == ["marker"]
    assert load_config(None, ["answer_extraction=[hashes,marker]"]).search.answer_extraction == ["marker", "hashes"]
    for bad, words in ((["boxd"], "'boxd' is not allowed (did you mean 'boxed'?); choose one of: boxed, marker, "
                                  "hashes, last_number"),
                       ([], "must be a list of one or more of: boxed, marker, hashes, last_number"),
                       (5, "must be a list")):
        with pytest.raises(ConfigError, match="answer_extraction") as err:
            config_from_dict({"answer_extraction": bad})
        assert words in str(err.value)


def test_the_demo_reads_answers_as_its_recorded_results_were_read():
    from ets.app.demo import DEMO_CONFIG
    from ets.config import MARKED_ANSWER_RULES

    assert load_config(DEMO_CONFIG).search.answer_extraction == list(MARKED_ANSWER_RULES)
