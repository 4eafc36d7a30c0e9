"""ORPO: odds-ratio preference optimisation, no reference model.

ORPO lives in `trl.experimental` in current TRL; this is the only module that imports from there. Its
log-probabilities come from the model's whole logits of every chosen and rejected sequence; with
`cross_entropy: chunked` (the default) they come from TRL's fused LM head instead (`add_fused_lm_head`, which TRL's
own DPO and KTO use): the per-token log-probabilities of the last hidden states, computed in tiles.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # noqa: E402 - after the variable that quiets it

from autotrain.config.llm import LLMConfig  # noqa: E402
from autotrain.trainers.llm.preference import build_preference_trainer  # noqa: E402
from autotrain.training.lm_loss import language_model  # noqa: E402
from autotrain.training.plan import RunPlan  # noqa: E402


class AutotrainORPOTrainer(ORPOTrainer):
    """TRL's ORPOTrainer whose `concatenated_forward` reads per-token log-probabilities from TRL's fused LM head
    (`cross_entropy: chunked`) rather than from the whole logits (`full`). The loss, its terms and the logged
    metrics are the same: `logits/chosen` and `logits/rejected` are the mean logit, from the head's per-token
    means."""

    def __init__(self, *args, cross_entropy: str = "chunked", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cross_entropy = cross_entropy
        if cross_entropy == "chunked":
            from trl.trainer import add_fused_lm_head

            add_fused_lm_head(language_model(self.model), outputs=("log_probs", "mean_logits"))

    def concatenated_forward(self, model, batch):
        if self.cross_entropy != "chunked" or self.is_encoder_decoder:
            return super().concatenated_forward(model, batch)
        joined = self.concatenated_inputs(batch, padding_value=self.padding_value, device=self.accelerator.device)
        chosen = batch["chosen_labels"].shape[0]
        ids, mask = joined["concatenated_input_ids"], joined["concatenated_attention_mask"]
        extra = {"output_router_logits": True} if self.aux_loss_enabled else {}
        # every position scored (no -100 among the labels), so that the mean logit covers padding as ORPO's does
        out = model(ids, attention_mask=mask, use_cache=False, labels=ids, fused_lm_head=True, **extra)
        attended = mask[:, 1:].to(out.log_probs.dtype)  # ORPO's NLL: every attended token of the chosen rows
        answer = (joined["concatenated_labels"][:, 1:] != -100).to(out.log_probs.dtype)  # its odds: the answers
        nll = -(out.log_probs[:chosen] * attended[:chosen]).sum() / attended[:chosen].sum()
        logps = (out.log_probs * answer).sum(-1) / answer.sum(-1)
        found = (logps[:chosen], logps[chosen:], out.mean_logits[:chosen], out.mean_logits[chosen:], nll)
        return (*found, out.aux_loss) if self.aux_loss_enabled else found


def fused_head_available() -> bool:
    """Whether this TRL has its fused LM head (TRL 1.16 has; earlier releases do not)."""
    try:
        from trl.trainer import add_fused_lm_head  # noqa: F401
    except ImportError:
        return False
    return True


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    if plan.cross_entropy == "chunked" and not fused_head_available():
        from autotrain.errors import eprint

        why = "this TRL has no fused LM head (`trl.trainer.add_fused_lm_head`, TRL 1.16+)"
        eprint(f"note: training_args.cross_entropy: chunked: {why}; ORPO computes the full logits")
        plan = plan.refine(why, cross_entropy="full")
    extra = {}
    if cfg.training_args.max_completion_length:
        extra["max_completion_length"] = cfg.training_args.max_completion_length
    return build_preference_trainer(
        AutotrainORPOTrainer, ORPOConfig, cfg, plan, callbacks, token, extra, cross_entropy=plan.cross_entropy
    )
