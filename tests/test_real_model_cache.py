"""The converted SmolLM2 folder (tests/real_model.py) goes into its place whole or not at
all: an interrupted conversion leaves nothing behind, and a conversion that finds another
run's folder already in place uses it. The conversion itself is replaced here (it takes
~30 s; the real-model tests run it)."""

import pytest

import tests.real_model as real_model

# The folder is named by the package's version.
pytestmark = pytest.mark.skipif(real_model.gguf_file() is None,
                                reason=f"{real_model.PACKAGE} is not installed: {real_model.INSTALL}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "ets-tests"


def test_an_interrupted_conversion_leaves_no_folder(cache, monkeypatch):
    def interrupted(gguf, out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(real_model, "_convert", interrupted)
    with pytest.raises(KeyboardInterrupt):
        real_model.smollm2_folder()
    assert list(cache.iterdir()) == []  # neither the folder nor its temporary
    monkeypatch.setattr(real_model, "_convert", lambda gguf, out: (out / "config.json").write_text("{}"))
    folder = real_model.smollm2_folder()
    assert folder == real_model.cache_folder() and [p.name for p in cache.iterdir()] == [folder.name]
    assert (folder / "config.json").read_text() == "{}"


def test_a_folder_put_in_place_by_another_run_meanwhile_is_used(cache, monkeypatch):
    def racing(gguf, out):
        real_model.cache_folder().mkdir(parents=True)  # another run finished first
        (real_model.cache_folder() / "config.json").write_text('{"theirs": 1}')
        (out / "config.json").write_text('{"ours": 1}')

    monkeypatch.setattr(real_model, "_convert", racing)
    folder = real_model.smollm2_folder()
    assert (folder / "config.json").read_text() == '{"theirs": 1}'
    assert [p.name for p in cache.iterdir()] == [folder.name]
