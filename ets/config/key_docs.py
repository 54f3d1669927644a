"""What each config key means, in one to three lines: the one place the descriptions of
docs/config.md come from.

scripts/make_reference_docs.py writes docs/config.md from these descriptions and from the
dataclasses in sections.py, which say each key's default and type (and whose checks say its
allowed values); tests/test_reference_docs.py checks that every field of a section has a
description here and that every description names a field that exists. A new key is a
field in sections.py and a line here. Descriptions are Markdown.
"""

from __future__ import annotations

# What each section is for: the line under its heading.
SECTION_DOCS: dict[str, str] = {
    "search": "What one search does: the method, its width, how the policy samples, how steps are scored and the "
              "answer chosen. The defaults follow the ETS public code.",
    "policy": "The model that proposes the steps, and how it runs.",
    "reward": "The process reward model (PRM) that scores each step: a built-in, a plug-in or `module:attr`, with its "
              "own options.",
    "data": "Which problems are searched.",
    "run": "Keys at the top level of a config file, beside the sections: where the results go and how the run is "
           "carried out.",
}

# section -> key -> description. "run" is RunConfig's own keys, written at the top level
# of a config file.
KEY_DOCS: dict[str, dict[str, str]] = {
    "search": {
        "method": "The search strategy: a built-in, or your own `Strategy` subclass as `module:Class` (its "
                  "options in `options`). The ETS code's names are accepted too: `beam_search`, `softmax` "
                  "(REBASE), `softmax_costmodel` (ETS), `bon`.",
        "width": "W: the completed trajectories a search may produce (its sampling budget).",
        "temperature": "The policy's sampling temperature (0: greedy).",
        "top_p": "Nucleus sampling: the smallest set of tokens whose probability reaches `top_p`, in (0, 1].",
        "top_k": "Sample among the `top_k` likeliest tokens; 0 turns it off.",
        "max_step_tokens": "Tokens a step may generate before it is cut.",
        "max_tokens": "Tokens a trajectory may generate in all: a step is taken while the trajectory holds "
                      "fewer, and the step that reaches it completes the trajectory (finish `max_tokens`), so a "
                      "trajectory may hold up to `max_tokens - 1 + max_step_tokens`.",
        "max_depth": "Steps a trajectory may take; one that reaches it is completed (finish `max_depth`).",
        "softmax_temperature": "REBASE and ETS: the temperature T of the softmax over step scores that shares out "
                               "the width.",
        "fixed_width": "beam: the beams kept each step; dvts: the subtrees grown. Unset (null, or the ETS code's "
                       "-1): ceil(sqrt(W)).",
        "lambda_c": "ETS: the weight of the KV cost (the nodes kept) in the integer program.",
        "lambda_s": "ETS: the weight of semantic coverage (the clusters kept) in the integer program; "
                    "0 skips the clustering.",
        "cost": "ETS: a node's cost. `uniform`: 1/(M+N) each, the paper's; `tokens`: its share of the tokens "
                "of all the nodes.",
        "final_pass": "ETS: how the width is spent after the solve. `renormalise`: REBASE again over the kept "
                      "leaves (the paper's); `keep_counts`: each kept leaf keeps its REBASE count and only the "
                      "pruned leaves' children are handed out again.",
        "cluster_threshold": "ETS: the cosine distance at which the dendrogram of step embeddings is cut into "
                             "clusters, or a mapping `{embedder: cut}` from which the run's `embedder` picks its "
                             "own. Unset: 0.05 for a sentence model (the paper's code); `policy` and `prm` need "
                             "theirs given (`scripts/calibrate_cluster_cut.py --embedder policy --embedder prm`).",
        "embedder": "ETS: what embeds a step for clustering. A sentence-transformers model (a name or a folder; "
                    "the default ships offline); `static:<model>`: that model distilled by model2vec into a static "
                    "embedder on first use, cached under `$ETS_CACHE_DIR` (default `~/.cache/ets`); `policy` or "
                    "`prm`: the mean of that model's final hidden states over the step's tokens, from the forward "
                    "it runs anyway (the vLLM backend cannot hand them out).",
        "options": "The strategy's own options: keyword arguments of a `module:Class` strategy's constructor "
                   "(`search.options.NAME=value` on the command line). The built-in strategies take none.",
        "kv_budget": "ETS: a hard cap on the tokens of the nodes kept (beyond the paper); null: no cap.",
        "lp_relax": "ETS: solve the LP relaxation and round, instead of the integer program.",
        "lp_time_limit": "ETS: seconds a solve may take before that step keeps REBASE's allocation (wall-clock; "
                         "each fallback is counted in the record's `lp_fallback`).",
        "aggregation": "How a trajectory's step scores make its score: the last, the least, the mean or the "
                       "product.",
        "vote": "How the answer is chosen: `best` (the best-scored trajectory's), `majority` (the most frequent) "
                "or `weighted` (the highest sum of scores).",
        "seed": "The search's seed: a problem's records depend only on the config, this seed and the problem.",
        "answer_markers": "Phrases that end a trajectory when a step starts a sentence with one (case as written); "
                          "EOS and a `\\boxed{}` answer always do. `[]`: those two only. The `marker` answer rule "
                          "reads the answer after each one too (`Final Answer:` for a model that writes it).",
        "compat": "`project`: the project's corrected behaviour; `ets_code`: the ETS public code's selection and "
                  "accounting where they differ (docs/FIDELITY.md).",
        "answer_extraction": "The rules that read a trajectory's final answer, in any order (the precedence is "
                             "fixed): `boxed`, then `marker` and `hashes` (the later in the text wins), then "
                             "`last_number`. null: all four, or all but `last_number` under `compat: ets_code`.",
        "lookahead": "beam, dvts: each candidate is scored after this many more greedy steps (search-and-learn's; "
                     "docs/search_and_learn.md).",
        "filter_duplicates": "beam: a candidate whose trajectory text an earlier candidate has is not kept "
                             "(search-and-learn's).",
        "sort_completed": "beam: past W completed trajectories, only the W best (by `aggregation`) vote "
                          "(search-and-learn's).",
    },
    "policy": {
        "model": "The policy: a model folder, a hub name, or `tiny:<arch>` (a small randomly initialised model, "
                 "for tests).",
        "backend": "`engine`: the project's prefix-sharing KV-cache engine; `hf`: plain `transformers` generate "
                   "(the baseline); `vllm`: vLLM (the `vllm` extra, installed where it runs). A key set that the "
                   "backend does not read (the engine's `compile` and `max_batch_tokens` elsewhere, a pool size "
                   "on `hf`) is named as doing nothing when the run starts and by `--check`.",
        "device": "Where the models run: `cpu`, `cuda`, `cuda:N` (the GPU numbered N) or `mps`.",
        "dtype": "The models' weights and compute type. `auto`: bfloat16 on cuda, float32 on cpu, float16 on mps.",
        "prompt_template": "The question's text, with the placeholder `{question}`; inside the user turn when a "
                           "chat template is used.",
        "chat_template": "`auto`: the tokenizer's chat template when it has one; `true`: it must have one; "
                         "`false`: the raw `prompt_template`; or a Jinja template, inline or a file path.",
        "system_prompt": "A system turn before the question (with a chat template); null: none.",
        "chat_template_kwargs": "Variables passed to the chat template, e.g. `{date_string: 26 Jul 2024}`.",
        "step_delimiter": "Where a step ends (kept in the step's tokens).",
        "kv_budget_tokens": "The KV pool in tokens (the engine's, or vLLM's on its CPU build); null: the engine's "
                            "sized by `memory_fraction`, vLLM's its own default. The hf backend keeps none.",
        "memory_fraction": "engine: the share of the device's free memory, measured once the models are loaded, "
                           "that the KV pools take: the policy's and a PRM's own engine on the same device, each "
                           "with the gather buffers it may keep (up to twice its pool for an engine that "
                           "decodes). null: 0.9 on cuda; on the cpu a fixed pool of 65,536 tokens per engine, so "
                           "that throughput does not depend on what else the machine holds. Runs sharing a GPU "
                           "(`ets sweep --jobs N`) take their share of it (1/N). The run summary and "
                           "`ets run --check` show the split ([backends.md](backends.md)).",
        "reward_memory_share": "The PRM's part of the KV memory `memory_fraction` gives, in (0, 1); null: the "
                               "part at which both pools hold the same number of tokens.",
        "kv_dtype": "engine: how K and V are stored; null: as `dtype`. `bfloat16` under a float32 model holds "
                    "twice the tokens in the same memory, its logits about 1e-3 off.",
        "max_batch_tokens": "engine: the tokens of one forward pass.",
        "compile": "engine: `on` runs the model's forward under `torch.compile` (attention an opaque op; on cuda "
                   "forwards of up to 512 rows replayed as CUDA graphs, the rows padded to a few sizes); `off` runs "
                   "it eagerly; `auto` "
                   "compiles on cuda, where an eager step is mostly kernel launches, and not on cpu, where it "
                   "pays only over long runs, if at all (15-20 s before the first step on the tiny demo policy, "
                   "about 2 min on SmolLM2-135M with inductor's cache cold; the tree benchmark then ran "
                   "1.05-1.24x and 0.99-1.11x eager) and its last bits differ from eager's, so a sampled "
                   "search's records do too. Where a compiled forward fails (no compiler for the device, an "
                   "inductor error, a CUDA graph that cannot be recorded), `auto` warns and runs it and every "
                   "later one eagerly; `on` stops with the cause. A PRM's own engine has its own key, "
                   "`reward.options.compile`.",
        "prepack": "engine: `on` runs the model's linear layers on a copy of their weights reordered once "
                   "for oneDNN (cpu only; float32 or bfloat16; the copy takes the linear weights' memory again); "
                   "`off` runs them as torch does (a PRM's own engine too); `auto` is `on` on the cpu unless "
                   "`compile` is on (whose linears are plain matmuls). On SmolLM2-135M `ets run` ran 1.50x faster "
                   "with it (REBASE W=4), the tree benchmark 1.16x (W=16).",
        "max_context": "Tokens a path (prompt and steps) may hold; null: the model's `max_position_embeddings`.",
        "prompt_overflow": "A prompt that fills the context: `error` stops the run naming the problem; "
                           "`truncate` keeps the end of its question, inside its template.",
        "vllm": "vLLM's own engine options, passed to `vllm.LLM` (backend `vllm` only), e.g. "
                "`{tensor_parallel_size: 2, gpu_memory_utilization: 0.8}`; the names are listed below.",
    },
    "reward": {
        "name": "The process reward model: a built-in, a name registered by a plug-in package, or `module:attr` "
                "(docs/rewards.md).",
        "model": "The PRM's model folder or hub name; null: the policy's model.",
        "options": "The reward's own options, checked against the ones it declares (listed below for the "
                   "built-ins).",
    },
    "data": {
        "path": "The problems: a JSONL file.",
        "format": "The file's layout: `gsm8k` (`question`, `answer` with `#### N`), `math500` (`problem`, "
                  "`answer`), `fields` (named by `question_field` and `answer_field`), or `auto` (told apart by "
                  "the first record's keys).",
        "question_field": "With `format: fields`: the field that holds the question (under `format: auto`, "
                          "naming it reads the file as `fields`).",
        "answer_field": "With `format: fields`: the field that holds the ground-truth answer (as `question_field`).",
        "hf_name": "A Hugging Face `datasets` name to load instead of `path` (on machines with the hub; the "
                   "`hub` extra).",
        "hf_split": "The split of `hf_name`.",
        "start": "The first problem of the slice [start, end), in file order, before `limit`; a sliced run "
                 "writes `<output>.<start>-<end>.jsonl`. null: from the first.",
        "end": "The end of the slice [start, end) (the problem at `end` is not in it); null, or past the last "
               "problem: to the last.",
        "limit": "Search only the first N problems (of the slice); null: all of them.",
    },
    "run": {
        "output": "The results file (JSONL, one line per problem); its config and summary are written beside it.",
        "concurrency": "Problems searched at once (one batched policy call per round); results do not depend "
                       "on it.",
        "save_trees": "Add each whole search tree to its problem's result line.",
        "rounds": "`in_flight`: each problem's round runs on its own and is scored as soon as its own steps "
                  "end, while the others decode on (the engine policy; the hf and vLLM policies, `lookahead` "
                  "and a PRM on the policy's own engine run whole rounds); `whole`: every round waits for its "
                  "longest step. Results do not depend on it; which is faster does "
                  "([ARCHITECTURE.md](ARCHITECTURE.md#one-round-of-the-search-loop)).",
        "torch_threads": "torch's intra-op threads in this process; null: torch's default, one per core. Small "
                         "models often run faster on fewer ([backends.md](backends.md)).",
        "num_threads": "The ETS code's SGLang client threads: accepted, with no effect here (a logged line says "
                       "so).",
        "policy_model_type": "The ETS code's model type for the policy: a preset of its prompt template and step "
                             "delimiter (`ets presets`); explicit `policy.*` keys win.",
        "reward_model_type": "The ETS code's model type for the PRM: a preset of its name and options "
                             "(`ets presets`); explicit `reward.*` keys win.",
        "no_effect": "Recipe keys accepted that do nothing here (search-and-learn's `push_to_hub`, ...), as given; "
                     "filled from a recipe, and each logged by `ets run`.",
    },
}

# Keys a config file may hold that are no field of a section: read when the file is loaded.
RECIPE_KEY_DOCS: dict[str, str] = {
    "store_path": "The ETS code's results folder: `output` becomes `<store_path>/results.jsonl` (an explicit "
                  "`output` wins).",
}

# The mappings whose own keys are listed under their section: what the list is.
NESTED_DOCS: dict[str, str] = {
    "policy.vllm": "vLLM's own `vllm.LLM` options that `policy.vllm` may set, each checked against its type; vLLM's "
                   "documentation says what they do. The backend sets `model` and `tokenizer` itself; "
                   "`enable_prefix_caching` defaults to true, and `dtype`, `seed` and `max_model_len` to "
                   "`policy.dtype`, the search seed and `policy.max_context`.",
    "reward.options": "Each built-in reward's options, with their defaults; docs/rewards.md says what they do and "
                      "which to set for each checkpoint.",
}
