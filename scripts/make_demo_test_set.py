"""Rewrite the shipped demo test set (ets/demo/data/test.jsonl) from its seed.

    python scripts/make_demo_test_set.py

The file is `TEST_SIZE` problems of the test split from `TEST_SEED` (ets/demo/splits.py);
tests/test_demo_task.py checks that the shipped file equals what this writes.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.demo.splits import TEST_PATH, TEST_SIZE, write_test_file  # noqa: E402

if __name__ == "__main__":
    write_test_file()
    print(f"wrote {TEST_SIZE} problems to {TEST_PATH}")
