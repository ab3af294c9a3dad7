"""The SGLang bridge: our cache and SGLang 0.5.23's own, side by side.

``sglang_env`` finds SGLang (optional, installed CPU-only by ``make bridge-setup``:
no extra of ours, since pip would pull its CUDA torch); ``sglang_side`` drives its UnifiedRadixCache with
our scenario ops; ``canonical`` puts both caches' state in one comparable form;
``differential`` runs a scenario on both in lockstep (``urc run --against sglang``);
``side_by_side`` times both on one trace (``urc bench --against sglang``). Nothing
outside this package and ``workbench.record`` imports SGLang.
"""
