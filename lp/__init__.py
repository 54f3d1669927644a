"""The ETS integer program (HiGHS via scipy) and the semantic clustering it uses.

    from ets.lp import solve_selection
    kept, objective, status = solve_selection(parents, leaves, weights, costs, clusters,
                                              lambda_c=1.0, lambda_s=1.5)

program.py builds the sparse program, solve.py solves it (time limit, fallback,
tie-break), clustering.py embeds and clusters step texts. See docs/algorithms.md, "ETS: the integer program".
"""

if __name__ == "lp":  # this folder imported by its old name (a checkout on sys.path): it is ets.lp
    from ets.namespace import take_old_name

    take_old_name(__name__)

from ets.lp.clustering import StepClusterer, cluster_embeddings, load_embedder, prepare_embedder
from ets.lp.program import Layout, Program, build_program, tree_layout
from ets.lp.solve import DEFAULT_TIME_LIMIT, FALLBACK_STATUSES, Selection, solve_program, solve_selection

__all__ = [
    "DEFAULT_TIME_LIMIT",
    "FALLBACK_STATUSES",
    "Layout",
    "Program",
    "Selection",
    "StepClusterer",
    "build_program",
    "cluster_embeddings",
    "load_embedder",
    "prepare_embedder",
    "solve_program",
    "solve_selection",
    "tree_layout",
]
