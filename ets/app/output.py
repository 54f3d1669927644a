"""An output and the files beside it, opened for one run that may resume it.

    with open_output(config, problems, overwrite=False) as writer:
        todo = [p for p in problems if p.id not in writer.done_ids]
        ...   writer.write(record)

For an output `runs/r.jsonl`:

    runs/r.jsonl           the results, one line per problem (ets/app/writer.py), locked
                           while a process writes them (ets/app/lock.py)
    runs/r.config.json     what made them (ets/app/provenance.py), written with the first result
    runs/r.summary.json    accuracy and throughput (ets/app/run.py), rebuilt if unreadable

An output's name ends in `.jsonl`, and the files beside it are named from the part before:
so no two outputs share a config or a summary (`exp` and `exp.jsonl` would both have
`exp.config.json`), and `ets eval`, which reads a `.json` file as the ETS code's
answers.json, never mistakes a results file for one.

Opening, in order: the path is checked (a `.jsonl` name, not a folder, a FIFO or a device,
its parent a writable folder), the provenance is computed (a missing model path fails
here), the results file is locked (made empty if missing), its records read (a corrupt
line fails here), and a non-empty output made by another config, or holding problems this
run does not select, is refused naming what differs. A results file left empty is removed
again on closing, and so are folders made for it.
"""

from __future__ import annotations

import json
import errno
import os
import re
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator, Sequence

from ets.app.jsonl import parse_lines, resumable
from ets.app.provenance import check_records, describe, differences
from ets.app.writer import OutputError, ResultsWriter
from ets.config import RunConfig
from ets.data import Problem
from ets.paths import special_kind

WAY_OUT = "write to a new output (--output PATH) or pass --overwrite to start it afresh"
SUFFIX = ".jsonl"


def summary_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.stem + ".summary.json")


def config_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.stem + ".config.json")


@contextmanager
def open_output(config: RunConfig, problems: Sequence[Problem], *, overwrite: bool = False,
                way_out: str = WAY_OUT, recorded: dict[str, Any] | None = None) -> Iterator[ResultsWriter]:
    """The results writer of `config.output`, locked, checked against `config`; with
    `overwrite`, the old results and summary are removed and the provenance rewritten when
    the first new result is written (a run that fails before leaves them). `recorded`
    adds keys to the provenance's `recorded` part (kept for the reader, never compared)."""
    output = Path(config.output)
    check_output_path(output)
    check_not_the_data(config)
    made = describe(config)
    made["recorded"].update(recorded or {})
    created = _make_parents(output.parent)
    try:
        with _writer(output, lambda: write_json_atomic(config_path(output), made), overwrite,
                     on_clear=lambda: summary_path(output).unlink(missing_ok=True)) as writer:
            if not overwrite:
                _check_resumable(output, writer, problems, made, way_out)
            yield writer
    finally:
        if not output.exists():
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    break


def check_outputs(configs: Sequence[RunConfig], problems: Sequence[Problem], *, overwrite: bool,
                  way_out: str) -> None:
    """Before a sweep starts: every pair's output is usable (without `overwrite`, its
    results resumable by its config), so a refusal comes before any model loads rather
    than half-way through. With `overwrite` nothing is cleared here: each run clears its
    own output when it writes its first result (`open_output`)."""
    for config in configs:
        check_output_path(Path(config.output))
        check_not_the_data(config)
    if overwrite:
        return
    for config in configs:
        output = Path(config.output)
        if not output.parent.is_dir():
            continue  # nothing there yet
        with _writer(output, None, False) as writer:
            _check_resumable(output, writer, problems, describe(config), way_out)


def _check_resumable(output: Path, writer: ResultsWriter, problems: Sequence[Problem], made: dict[str, Any],
                     way_out: str) -> None:
    """Results made by another config, or of other problems, refused."""
    if writer.records:
        check_compatible(output, writer.records, problems, made, way_out)


def resume_note(config: RunConfig, problems: Sequence[Problem], overwrite: bool = False) -> str:
    """For `--check`: what `config.output` holds and what a run would search, or the error a
    run would raise on it (results of another config or of other problems). Reads it,
    takes no lock, changes nothing."""
    output = Path(config.output)
    if not output.is_file() or output.stat().st_size == 0:
        return f"output {output}: new; a run searches {_all(len(problems))}"
    if overwrite:
        return (f"output {output}: --overwrite: its results go when the run writes its first new one; a run "
                f"searches {_all(len(problems))}")
    records = resumable(parse_lines(output.read_bytes(), output), output)  # a torn last line is left out
    if records:
        check_compatible(output, records, problems, describe(config), WAY_OUT)
    done = {r["id"] for r in records}
    todo = sum(p.id not in done for p in problems)
    trees = treeless_note(output, records, config.save_trees)
    return (f"output {output}: holds {len(records)} result{'' if len(records) == 1 else 's'} of this config; a run "
            f"searches the other {todo} problem{'' if todo == 1 else 's'}" + (f"; {trees}" if trees else ""))


def _all(n: int) -> str:
    return "its one problem" if n == 1 else f"all {n} problems"


def treeless_note(output: Path, records: Sequence[dict[str, Any]], save_trees: bool) -> str | None:
    """With save_trees, a line on the results already in `output` without their trees
    (written without it: save_trees does not change a result, so they are resumed as they are)."""
    if not save_trees:
        return None
    without = sum("tree" not in r for r in records)
    if not without:
        return None
    return (f"save_trees: {without} of the results already in {output} have no tree and keep none (resuming "
            "searches only the problems not yet done); --overwrite searches them all again, with their trees")


def check_compatible(output: Path, records: Sequence[dict[str, Any]], problems: Sequence[Problem],
                     made: dict[str, Any], way_out: str) -> None:
    old = read_json(config_path(output))
    if old is None or not isinstance(old.get("compared"), dict):
        raise OutputError(f"{output} holds {len(records)} results but no readable record of the config that "
                          f"made them ({config_path(output).name}); {way_out}")
    changed = differences(old["compared"], made["compared"])
    if changed:
        raise OutputError(f"{output} holds results of another config ({'; '.join(changed)}); {way_out}")
    why = check_records(records, problems)
    if why:
        raise OutputError(f"{output}: {why}; {way_out}")


def check_not_the_data(config: RunConfig) -> None:
    """The results must not go into the data file the problems are read from (a rerun with
    --overwrite would replace the problems with results)."""
    data = config.data.path
    if not data:
        return
    output, data = Path(config.output), Path(data).expanduser()
    same = output.exists() and data.exists() and os.path.samefile(output, data)
    if same or _resolved(output, "output") == _resolved(data, "data.path"):
        raise OutputError(f"output {str(output)!r} is the data file the problems are read from (data.path); "
                          "write the results to another file, e.g. --output runs/results.jsonl")


def _resolved(path: Path, key: str) -> Path:
    """`path` with its links followed; a loop of symbolic links is the user's to mend."""
    try:
        return path.absolute().resolve()
    except (RuntimeError, OSError) as exc:  # a loop: RuntimeError before Python 3.13, OSError ELOOP after
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise
        raise OutputError(f"{key} {str(path)!r} is a loop of symbolic links; point it at a file") from None


def check_output_path(output: Path) -> None:
    """A results path must name a regular file ending in .jsonl, in a writable folder, with
    nothing but files where its config and summary go; checked before anything is made."""
    kind = special_kind(output)
    if kind is None and output.absolute().parts[1:2] in (("dev",), ("proc",)):
        kind = "a device or a process's stream"  # /dev/stdout redirected to a file is a regular file
    if kind == "a folder":
        raise OutputError(f"output {str(output)!r} is a folder; give a file, e.g. {str(output / 'results.jsonl')!r}")
    if kind is not None:
        raise OutputError(f"output {str(output)!r} is {kind}, not a regular file: results are written to a file "
                          "that a rerun resumes; give a file path ending in .jsonl (and read it with ets eval)")
    if not output.name.endswith(SUFFIX) or output.name == SUFFIX:
        stem = re.sub(r"\.jsonl?$", "", output.name, flags=re.IGNORECASE) or "results"
        old = (f"; an existing {output.name} of an earlier ets resumes once renamed {stem}{SUFFIX}"
               if output.is_file() else "")
        raise OutputError(f"output {str(output)!r}: name it with the .jsonl suffix, e.g. "
                          f"{str(output.with_name(stem + SUFFIX))!r} (its config and summary are named from the "
                          f"part before it, and ets eval reads a .json file as the ETS code's answers.json){old}")
    for side in (config_path(output), summary_path(output)):
        if (kind := special_kind(side)) is not None:
            raise OutputError(f"output {str(output)!r}: {str(side)!r} beside it is {kind}, where its "
                              f"{side.name.split('.')[-2]} record goes; remove it or choose another output path")
    folder = output.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"output {str(output)!r}: {str(folder)!r} is a file, not a folder; choose another output path")
    if not os.access(folder, os.W_OK | os.X_OK) or (output.exists() and not os.access(output, os.W_OK)):
        where = output if output.exists() else folder
        raise OutputError(f"output {str(output)!r}: {str(where)!r} is read-only; choose another output path")


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None if it is missing, empty, truncated or not an object."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def write_json_atomic(path: Path, value: Any) -> None:
    """`value` as indented JSON, written as `write_text_atomic` writes."""
    write_text_atomic(path, json.dumps(value, indent=2))


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file and rename it over `path`: a reader sees the old file or
    the new one, never a truncated one. A write that fails (a full disk) removes the
    temporary file and raises its OSError naming `path`."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None


@contextmanager
def _writer(output: Path, on_create, overwrite: bool, on_clear=None) -> Iterator[ResultsWriter]:
    try:
        writer = ResultsWriter(output, on_create, overwrite=overwrite, on_clear=on_clear)
    except OSError as exc:  # e.g. read-only for root-less checks that os.access missed
        raise OutputError(f"output {str(output)!r}: cannot write there ({exc.strerror}); "
                          "choose another output path") from None
    with writer:
        yield writer


def check_can_write(output: Path) -> None:
    """`--check`'s proof that a run can make its files: the missing folders are made and a
    file is made in the last, and all removed again (the permission bits say yes to root
    where the file system still refuses, e.g. under /sys)."""
    made = _make_parents(output.parent)
    try:
        fd, probe = tempfile.mkstemp(dir=output.parent, prefix=".ets-check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write in {str(output.parent)!r} ({exc.strerror}); choose another output "
                          "path") from None
    finally:
        for folder in reversed(made):
            with suppress(OSError):  # something else wrote there meanwhile: theirs to keep
                folder.rmdir()


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and its missing parents; returns those created, outermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    missing.reverse()
    try:
        for f in missing:
            f.mkdir()
    except OSError as exc:
        raise OutputError(f"cannot create folder {str(f)!r} ({exc.strerror}); choose another output path") from None
    return missing
