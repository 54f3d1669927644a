"""Answer math: what a trajectory answered, whether two answers are equal, which one wins.

    extract.py     the final answer of a solution text (\\boxed{}, "The answer is", ####, the
                   last number) and the rule that found it
    grading.py     mathematical equivalence (math-verify, with a time limit)
    aggregate.py   step-score aggregation (last/min/mean/prod) and votes (best/majority/weighted)
"""

from ets.answers.extract import Extracted, extract, extract_answer, is_final_step

__all__ = ["Extracted", "extract", "extract_answer", "is_final_step"]
