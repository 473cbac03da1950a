"""The prompt, split for reuse: a shared prefix (instructions + few-shot turns, run once) and a short
per-ticket suffix (the ticket, then the chat template's hand-over to the assistant), plus each label's
token sequence.

The split is only sound if ``tokens(prefix) + tokens(suffix) == tokens(prefix + suffix)``. That holds
when the ticket starts and ends at hard token boundaries (a newline before it, a special token after
it) — true of ChatML-style templates such as SmolLM2's and Qwen2.5's. :meth:`Prompt.check_split`
proves it for given texts and the engine runs it at start-up on the task's examples, so a template
for which it does not hold fails loudly instead of scoring subtly different prompts.

Ticket text is tokenized with special-token parsing off: a ticket containing ``<|im_end|>`` is read
as those characters, not as markup, so it cannot close its own turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .task import Task, TaskError

_MARK = "\u2063TICKETQ_TICKET\u2063"  # invisible separators: cannot occur in an instruction by accident
# Between a ticket's two readings when a head's recipe reads it twice (recipe.ECHO); the newline keeps the
# second reading's first token apart, as the question's does for the first.
ECHO_TEXT = "The message again:\n"


class PromptSplitError(RuntimeError):
    """The shared-prefix split changes tokenization for this template: caching would be wrong."""


def build_messages(task: Task, ticket: str) -> list[dict[str, str]]:
    """The chat: instructions as the system turn, examples as user/assistant turns, then the ticket."""
    labels = ", ".join(task.labels)
    system = f"{task.instructions}\nCategories: {labels}." if task.instructions else f"Categories: {labels}."
    messages = [{"role": "system", "content": system}]
    for ex in task.examples:
        messages.append({"role": "user", "content": _ask(task, ex.text)})
        messages.append({"role": "assistant", "content": ex.label})
    messages.append({"role": "user", "content": _ask(task, ticket)})
    return messages


def _ask(task: Task, ticket: str) -> str:
    # A newline before the ticket keeps its first token from merging with the question's last one.
    return f"{task.question}\n{ticket}" if task.question else ticket


def render(tokenizer: Any, task: Task, ticket: str) -> str:
    """The whole prompt as text, ready for the assistant's answer."""
    out: str = tokenizer.apply_chat_template(
        build_messages(task, ticket), tokenize=False, add_generation_prompt=True
    )
    return out


def markup(tokenizer: Any, text: str) -> str | None:
    """The first of the tokenizer's special-token strings (``<|im_end|>``...) that ``text`` contains, if any.
    The engine reads them in a ticket as plain characters; a whole prompt tokenized as one string (the
    reference scorer's) reads them as markup, so the two cannot be compared on such a ticket."""
    specials = (t.content for t in tokenizer.added_tokens_decoder.values() if t.special)
    return next((s for s in specials if s and s in text), None)


def _encode_all(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Ticket texts' tokens, special-token markup read as plain characters."""
    ids: list[list[int]] = tokenizer(list(texts), add_special_tokens=False, split_special_tokens=True)[
        "input_ids"
    ]
    return ids


def _encode(tokenizer: Any, text: str, *, split_special: bool = False) -> list[int]:
    ids: list[int] = tokenizer(text, add_special_tokens=False, split_special_tokens=split_special)[
        "input_ids"
    ]
    return ids


@dataclass(frozen=True)
class Prompt:
    """Token-level pieces of a task's prompt for one tokenizer."""

    prefix_text: str
    after_text: str  # template text between the ticket and the answer
    prefix_ids: tuple[int, ...]
    after_ids: tuple[int, ...]
    label_ids: tuple[tuple[int, ...], ...]  # per label: its tokens then the end-of-turn token
    max_ticket_tokens: int
    echo_ids: tuple[int, ...] = ()  # ECHO_TEXT: between a ticket's two readings (ticket_ids(echo=True))
    echo_fits: bool = False  # whether two readings of the longest ticket fit the context

    @classmethod
    def build(cls, tokenizer: Any, task: Task, *, context: int, max_ticket_tokens: int) -> Prompt:
        whole = render(tokenizer, task, _MARK)
        if whole.count(_MARK) != 1:
            raise PromptSplitError("the chat template does not place the ticket exactly once")
        prefix_text, after_text = whole.split(_MARK)
        answered = tokenizer.apply_chat_template(
            [*build_messages(task, "x"), {"role": "assistant", "content": _MARK}], tokenize=False
        )
        end_text = answered.split(_MARK, 1)[1]
        end_ids = _encode(tokenizer, end_text)
        if not end_ids:
            raise PromptSplitError("the chat template adds nothing after an answer; labels could not end")
        label_ids = tuple((*_encode(tokenizer, label), end_ids[0]) for label in task.labels)
        if len(set(label_ids)) != len(label_ids):
            dupes = [
                lab for lab, ids in zip(task.labels, label_ids, strict=False) if label_ids.count(ids) > 1
            ]
            raise TaskError(f"labels {dupes} tokenize identically and cannot be told apart")
        prefix_ids = tuple(_encode(tokenizer, prefix_text))
        after_ids = tuple(_encode(tokenizer, after_text))
        room = context - len(prefix_ids) - len(after_ids) - max(len(ids) for ids in label_ids)
        if room < 16:
            raise PromptSplitError(
                f"the prompt leaves {room} tokens of a {context}-token context for the ticket"
            )
        longest = min(max_ticket_tokens, room)
        echo_ids = tuple(_encode(tokenizer, ECHO_TEXT))
        return cls(
            prefix_text=prefix_text,
            after_text=after_text,
            prefix_ids=prefix_ids,
            after_ids=after_ids,
            label_ids=label_ids,
            max_ticket_tokens=longest,
            echo_ids=echo_ids,
            echo_fits=len(prefix_ids) + 2 * longest + len(after_ids) + len(echo_ids) <= context,
        )

    def fit(self, tokenizer: Any, texts: Sequence[str]) -> tuple[list[str], list[list[int]]]:
        """Each ticket as both scorers read it, and its tokens: without leading or trailing white space (the
        wire protocol strips it too; a leading newline would merge with the question's), and when longer
        than ``max_ticket_tokens``, cut at a character boundary to its first tokens: the text before the
        first token that does not fit, less a character split across tokens (an emoji, most CJK) and
        trailing white space. A cut text's tokens are those of the text itself, so the engine (which
        tokenizes the ticket alone) and the reference (the whole prompt as one string) read the same
        tokens; cutting the token list instead would leave half a character, which decodes to U+FFFD.
        One batched call to the (Rust) tokenizer, two more when some ticket is over-long (offsets need a
        fast tokenizer, which ``AutoTokenizer`` loads)."""
        limit = self.max_ticket_tokens
        kept = [t.strip() for t in texts]
        enc = _encode_all(tokenizer, kept)
        long = [i for i, ids in enumerate(enc) if len(ids) > limit]
        if not long:
            return kept, enc
        spans = tokenizer(
            [kept[i] for i in long],
            add_special_tokens=False,
            split_special_tokens=True,
            return_offsets_mapping=True,
        )["offset_mapping"]
        first_out = dict.fromkeys(long, limit)  # per over-long ticket: the first token left out
        while long:
            cuts = [kept[i][: spans[j][first_out[i]][0]].rstrip() for j, i in enumerate(long)]
            again = []
            for j, (i, cut, ids) in enumerate(zip(long, cuts, _encode_all(tokenizer, cuts), strict=True)):
                if len(ids) <= limit:
                    kept[i], enc[i] = cut, ids
                else:  # a cut inside a word may re-merge into more tokens: then leave one more out
                    first_out[i] -= 1
                    again.append(j)
            long, spans = [long[j] for j in again], [spans[j] for j in again]
        return kept, enc

    def ticket_ids(self, tokenizer: Any, texts: Sequence[str], *, echo: bool = False) -> list[list[int]]:
        """Per ticket: its tokens as :meth:`fit` leaves them, then the template's hand-over; with ``echo``,
        then ``ECHO_TEXT`` and the ticket's tokens again (its second reading)."""
        _, cut = self.fit(tokenizer, texts)
        after, again = list(self.after_ids), list(self.echo_ids)
        if echo:
            return [ids + after + again + ids for ids in cut]
        return [ids + after for ids in cut]

    def check_split(self, tokenizer: Any, texts: Sequence[str], *, echo: bool = False) -> None:
        """Raise :class:`PromptSplitError` unless prefix + suffix (+ each label) tokenize like the whole;
        with ``echo``, the suffix that reads each ticket twice (:meth:`ticket_ids`).

        ``texts`` must not contain special-token markup (which the whole-string tokenizer would parse)."""
        kept, encoded = self.fit(tokenizer, texts)
        for text, ids in zip(kept, encoded, strict=False):
            tail = ECHO_TEXT + text if echo else ""
            again = [*self.echo_ids, *ids] if echo else []
            whole = _encode(tokenizer, self.prefix_text + text + self.after_text + tail)
            if whole != [*self.prefix_ids, *ids, *self.after_ids, *again]:
                raise PromptSplitError(
                    f"prefix + suffix tokenization differs from the whole prompt for ticket {text[:60]!r}"
                )
        probe_text = self.prefix_text + "x" + self.after_text
        probe = _encode(tokenizer, probe_text)
        for label in self.label_ids:
            whole = _encode(tokenizer, probe_text + tokenizer.decode(list(label)))
            if whole != [*probe, *label]:
                raise PromptSplitError(
                    f"label tokens {list(label)} do not tokenize the same after the prompt"
                )
