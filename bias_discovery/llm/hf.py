"""A small transformers engine (`hf/<hub id or path>`), for models neither llama.cpp nor
vLLM can run. It is simple on purpose: one request at a time, `model.generate`, the
tokenizer's chat template. Output constraints are not supported here (use llamacpp, openai
or vllm for constrained judging). torch and transformers are imported in `__init__` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import EngineError
from ..progress import no_library_bars
from .base import SequentialEngine, message_dicts
from .config import ModelConfig
from .types import FinishReason, GenerationRequest, GenerationResponse

__all__ = ["TransformersEngine"]


class TransformersEngine(SequentialEngine):
    """Runs a causal LM with transformers on the GPU when there is one, else on the CPU."""

    name = "transformers"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(f"hf/{config.model}")
        self.config = config
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise EngineError(
                "the hf provider needs transformers and torch (pip install transformers); "
                "or use llamacpp/, openai/ or vllm/"
            ) from exc
        self._torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            with no_library_bars():
                self.tokenizer: Any = transformers.AutoTokenizer.from_pretrained(config.model)
                load_args: dict[str, Any] = {"dtype": config.dtype}
                load_args.update(config.engine_args)
                self.model: Any = transformers.AutoModelForCausalLM.from_pretrained(
                    config.model, **load_args
                ).to(self.device)  # type: ignore[arg-type]  # transformers' typing of .to
        except (OSError, ValueError) as exc:
            raise EngineError(f"transformers could not load {config.model}: {exc}") from exc
        self.model.eval()
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    def _check_batch(self, requests: Sequence[GenerationRequest]) -> None:
        if any(r.constraint is not None for r in requests):
            raise EngineError(
                "constraints are not supported by the hf provider; use llamacpp, openai or vllm"
            )
        if any(r.final_top_logprobs is not None for r in requests):
            raise EngineError(
                "log-probabilities (score verdicts) are not supported by the hf provider; use "
                "llamacpp, openai or vllm"
            )

    def _release(self) -> None:
        """Drop the model and free GPU memory."""
        self.model = None
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()

    def _generate_one(self, request: GenerationRequest) -> GenerationResponse:
        """An oversize prompt gets finish_reason "error"."""
        torch = self._torch
        encoded = self.tokenizer.apply_chat_template(
            message_dicts(request.messages), add_generation_prompt=True, return_tensors="pt",
            return_dict=True,
        )
        input_ids = encoded["input_ids"].to(self.device)
        n_prompt = int(input_ids.shape[1])
        if self.max_positions and n_prompt >= self.max_positions:
            return GenerationResponse(
                text=f"transformers error: prompt of {n_prompt} tokens does not fit the "
                f"context window of {self.max_positions} tokens",
                finish_reason="error",
                prompt_tokens=n_prompt,
            )
        max_new = request.max_tokens
        if self.max_positions:
            max_new = min(max_new, self.max_positions - n_prompt)
        sampling = request.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "do_sample": sampling,
            "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        }
        if sampling:
            kwargs.update(temperature=request.temperature, top_p=request.top_p, top_k=0)
            if request.seed is not None:
                torch.manual_seed(request.seed)
        else:  # silence the model's sampling defaults when decoding greedily
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if request.stop:
            kwargs.update(stop_strings=list(request.stop), tokenizer=self.tokenizer)
        with torch.no_grad():
            output = self.model.generate(
                input_ids, attention_mask=encoded["attention_mask"].to(self.device), **kwargs
            )
        new_tokens = output[0][n_prompt:].tolist()
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        finish: FinishReason = "stop"
        cut = [text.find(s) for s in request.stop if s in text]
        if cut:
            text = text[: min(cut)]
        elif len(new_tokens) >= max_new and new_tokens[-1] != self.tokenizer.eos_token_id:
            finish = "length"
        return GenerationResponse(
            text=text,
            finish_reason=finish,
            prompt_tokens=n_prompt,
            completion_tokens=len(new_tokens),
        )
