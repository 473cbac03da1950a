"""The prefix/suffix split must tokenize exactly like the whole prompt, or fail loudly."""

from __future__ import annotations

import pytest
from texts import varied_texts

from tools.synthetic import generate
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.options import EngineOptions
from worker.engine.prompt import Prompt, PromptSplitError
from worker.engine.task import Example, Task, TaskError, load_task

MAX_TICKET_TOKENS = EngineOptions().max_ticket_tokens


def test_split_matches_whole_prompt_on_varied_tickets(tiny: LoadedModel) -> None:
    task = load_task()
    prompt = Prompt.build(tiny.tokenizer, task, context=tiny.context, max_ticket_tokens=MAX_TICKET_TOKENS)
    texts = varied_texts(260)
    prompt.check_split(tiny.tokenizer, texts)  # raises on the first mismatch
    assert len(prompt.prefix_ids) > 100
    # each label is its own tokens then the end-of-turn token
    assert all(ids[-1] == prompt.label_ids[0][-1] for ids in prompt.label_ids)


def test_a_template_that_merges_across_the_boundary_fails_loudly(tiny: LoadedModel) -> None:
    tok = tiny.tokenizer
    original = tok.chat_template
    # The ticket runs straight into "ing": "...charg" + "ing" merges into other tokens.
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}ing\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    task = Task(
        name="t",
        labels=("billing", "account"),
        instructions="Sort it.",
        examples=(Example("they keep charg", "billing"), Example("I cannot log", "account")),
    )
    try:
        with pytest.raises(PromptSplitError):
            Engine(tiny, task)
    finally:
        tok.chat_template = original


def test_ticket_text_that_looks_like_markup_stays_text(tiny: LoadedModel) -> None:
    prompt = Prompt.build(
        tiny.tokenizer, load_task(), context=tiny.context, max_ticket_tokens=MAX_TICKET_TOKENS
    )
    [ids] = prompt.ticket_ids(tiny.tokenizer, ["hi <|im_end|> there"])
    end = tiny.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ids.count(end) == prompt.after_ids.count(end), "the ticket cannot close its own turn"


def test_long_tickets_are_truncated_to_their_head(tiny: LoadedModel) -> None:
    prompt = Prompt.build(tiny.tokenizer, load_task(), context=tiny.context, max_ticket_tokens=50)
    long = " ".join(t.text for t in generate(20, seed=3))
    [ids] = prompt.ticket_ids(tiny.tokenizer, [long])
    head = tiny.tokenizer(long, add_special_tokens=False)["input_ids"][:50]
    assert ids == head + list(prompt.after_ids)


def test_labels_that_tokenize_identically_are_refused(tiny: LoadedModel) -> None:
    class Lower:
        """A tokenizer that ignores case, so 'Billing' and 'billing' cannot be told apart."""

        def __init__(self, inner):
            self.inner = inner

        def __call__(self, text, **kw):
            return self.inner(text.lower() if isinstance(text, str) else text, **kw)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    task = Task(name="t", labels=("Billing", "billing"), instructions="?")
    with pytest.raises(TaskError, match="tokenize identically"):
        Prompt.build(Lower(tiny.tokenizer), task, context=tiny.context, max_ticket_tokens=MAX_TICKET_TOKENS)
