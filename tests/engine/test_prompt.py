"""The prefix/suffix split must tokenize exactly like the whole prompt, or fail loudly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from texts import varied_texts

from tools.synthetic import generate
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel
from worker.engine.options import EngineOptions
from worker.engine.prompt import Prompt, PromptSplitError, render
from worker.engine.reference import ReferenceScorer
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
    assert ids == head + list(prompt.after_ids)  # cut between words: the first 50 tokens exactly


@pytest.mark.parametrize("text", ["💳" * 400, "我的账户被锁定了，无法登录" * 40, "card 💳👍🏽 " * 100])
def test_a_cut_never_splits_a_character(tiny: LoadedModel, text: str) -> None:
    """Cutting the token list would end in half a character (U+FFFD once decoded), which the reference's
    whole-prompt tokenization cannot reproduce: the cut falls before the split character instead."""
    prompt = Prompt.build(tiny.tokenizer, load_task(), context=tiny.context, max_ticket_tokens=50)
    [kept], [ids] = prompt.fit(tiny.tokenizer, [text])
    assert text.startswith(kept) and "\ufffd" not in kept
    assert 50 - 4 <= len(ids) <= 50  # at most one character's tokens short of the limit
    assert ids == tiny.tokenizer(kept, add_special_tokens=False)["input_ids"]


def test_surrounding_white_space_is_not_read(tiny: LoadedModel) -> None:
    """As the wire protocol strips it: a leading newline would merge with the question's in one string."""
    prompt = Prompt.build(tiny.tokenizer, load_task(), context=tiny.context, max_ticket_tokens=50)
    plain, padded, blank = prompt.ticket_ids(tiny.tokenizer, ["my card", "\n\n  my card \t\n", " \n "])
    assert padded == plain
    assert blank == list(prompt.after_ids)  # white space only reads as the empty ticket


# Characters that stress byte-level BPE: multi-byte and multi-codepoint ones, white space of every kind,
# the control characters a ticket may carry, scripts without spaces (the wire protocol rejects the rest).
_CHARS = [*"ab yz AZ 09 .,!?'\"-_/\\()[]<>|@#%&*~`\t\n\r", *"éüßçñ€£¥©µ¿", "💳", "👍🏽", "👨‍👩‍👧", "🇫🇷"]
_CHARS += ["\u200d", "\u200b", "\u00a0", "\u3000", "\u2028", "\u0301"]
_CHARS += ["中", "文", "한", "ア", "ع", "ש", "я", "ก"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chars=st.lists(st.sampled_from(_CHARS), max_size=90))
def test_engine_and_reference_read_the_same_tokens_for_generated_tickets(
    tiny: LoadedModel, chars: list[str]
) -> None:
    """The engine tokenizes a ticket alone after the cached prefix; the reference renders the whole prompt
    and tokenizes it as one string. For any ticket (over-long ones cut, 24 tokens here) both must read the
    same tokens, or verify and the equivalence tests compare different inputs."""
    task = load_task()
    prompt = Prompt.build(tiny.tokenizer, task, context=tiny.context, max_ticket_tokens=24)
    text = "".join(chars)
    reference = ReferenceScorer(tiny.model, tiny.tokenizer, task, prompt)
    whole = tiny.tokenizer(render(tiny.tokenizer, task, reference.truncated(text)), add_special_tokens=False)
    [suffix] = prompt.ticket_ids(tiny.tokenizer, [text])
    assert whole["input_ids"] == [*prompt.prefix_ids, *suffix]
    assert len(suffix) - len(prompt.after_ids) <= 24


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
