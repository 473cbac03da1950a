"""The reference scorer: deliberately plain, item by item. ``verify``, the equivalence tests and the bench's
``naive`` mode all score with it.

For each ticket and each label it renders the whole chat prompt as text, tokenizes it as one string,
appends the label's tokens, runs the full model (full-vocabulary logits, no cache, no batching,
no packing) and sums the label tokens' log-probabilities over the label vocabulary. Slow on purpose:
the fast path must agree with it. With ``every_position`` it also drops its one shortcut and computes
the full-vocabulary log-softmax at every position, as a first version would (the bench's ``naive``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import chars
from .features import rarity
from .prompt import ECHO_TEXT, Prompt, render
from .recipe import CHARS, ECHO, LAST, MAX, RARE, Recipe
from .task import CONTENT_FREE, Task


class ReferenceScorer:
    def __init__(
        self, model: Any, tokenizer: Any, task: Task, prompt: Prompt, *, every_position: bool = False
    ) -> None:
        self.model, self.tokenizer, self.task, self.prompt = model, tokenizer, task, prompt
        self.every_position = every_position
        self.device = next(model.parameters()).device
        self.vocab = sorted({t for ids in prompt.label_ids for t in ids})
        self.body = model.get_decoder()
        head = model.get_output_embeddings()
        # The full output matrix in float32, as the engine's label rows are: in bfloat16, logits of
        # 20-30 are rounded to 1/8 and close calls would become ties that either side breaks its own way.
        self.head_weight = head.weight.detach().float()
        self.head_bias = None if getattr(head, "bias", None) is None else head.bias.detach().float()

    def truncated(self, text: str) -> str:
        """The ticket as the engine sees it (``Prompt.fit``): stripped, at most ``max_ticket_tokens``
        tokens, cut at a character boundary."""
        [kept], _ = self.prompt.fit(self.tokenizer, [text])
        return kept

    @torch.inference_mode()
    def score_one(self, text: str) -> list[float]:
        """Summed label-vocabulary log-probability of each label's full token sequence."""
        whole = render(self.tokenizer, self.task, self.truncated(text))
        prompt_ids: list[int] = self.tokenizer(whole, add_special_tokens=False)["input_ids"]
        vocab = torch.tensor(self.vocab, device=self.device)
        scores = []
        for label in self.prompt.label_ids:
            ids = torch.tensor([prompt_ids + list(label[:-1])], device=self.device)
            hidden = self.body(input_ids=ids).last_hidden_state[0]
            if not self.every_position:  # the one shortcut: only the positions that predict the label
                hidden = hidden[-len(label) :]
            logits = torch.nn.functional.linear(hidden.float(), self.head_weight, self.head_bias)
            if self.every_position:  # over the whole vocabulary, everywhere; renormalised below
                logits = torch.log_softmax(logits, dim=-1)[-len(label) :]
            total = 0.0
            for step, token in enumerate(label):
                row = logits[step]
                logp = torch.log_softmax(row[vocab], dim=-1)
                total += float(logp[self.vocab.index(token)])
            scores.append(total)
        return scores

    @torch.inference_mode()
    def features_one(self, text: str, recipe: Recipe) -> torch.Tensor:
        """A head's features the plain way: the whole prompt as one string, the full model run with every
        hidden state kept, then per part of the recipe, in its order, the ticket's tokens averaged
        (``mean``), weighted by their ids' rarity (``rare``) or maximized (``max``), or the last position
        (``last``), side by side. ``echo`` parts
        come from a second run over the prompt followed by ``ECHO_TEXT`` and the ticket again: its last
        tokens, the ticket's second reading, averaged (an empty ticket: the echo text's)."""
        ticket = self.truncated(text)
        whole = render(self.tokenizer, self.task, ticket)
        ids: list[int] = self.tokenizer(whole, add_special_tokens=False)["input_ids"]
        out = self.body(input_ids=torch.tensor([ids], device=self.device), output_hidden_states=True)
        start, end = len(self.prompt.prefix_ids), len(ids) - len(self.prompt.after_ids)
        own = end - start  # the ticket's tokens
        if own <= 0:  # an empty ticket: the engine pools its hand-over tokens
            end = len(ids)
        again = None
        if recipe.echo:
            twice = self.tokenizer(whole + ECHO_TEXT + ticket, add_special_tokens=False)["input_ids"]
            read = self.body(input_ids=torch.tensor([twice], device=self.device), output_hidden_states=True)
            again = (read.hidden_states, own if own > 0 else len(self.prompt.echo_ids))
        parts = []
        for part in recipe.parts:
            if part.pool == CHARS:  # the text's, not the model's (.chars)
                parts.append(chars.vector(text))
                continue
            hidden = out.hidden_states[part.layer][0].float()
            if part.pool == ECHO:
                assert again is not None
                states, k = again
                parts.append(states[part.layer][0][-k:].float().mean(0))
            elif part.pool == LAST:
                parts.append(hidden[-1])
            elif part.pool == MAX:
                parts.append(hidden[start:end].amax(0))
            elif part.pool == RARE:
                w = rarity(torch.tensor(ids[start:end]), int(self.model.config.vocab_size)).to(hidden.device)
                parts.append((hidden[start:end] * w[:, None]).sum(0) / w.sum())
            else:
                parts.append(hidden[start:end].mean(0))
        return torch.cat(parts).cpu()

    def score(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.score_one(t) for t in texts]

    def prior(self) -> torch.Tensor | None:
        """The task's calibration prior, computed the plain way (see ``task.CONTENT_FREE``)."""
        if not self.task.calibrate:
            return None
        return torch.tensor(self.score(list(CONTENT_FREE))).mean(0)
