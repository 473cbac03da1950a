"""Seeded synthetic support tickets: billing, technical and account, with realistic lengths.

Real ticket streams are mostly short (one or two sentences) with a long tail of customers who recount
the whole history. Benchmarks that only use short, equal-length texts hide the cost of padding, so the
length of each ticket is drawn from a log-normal (median about 30 words, clipped at 400) and the text
is grown to that length from templates: a greeting, the issue, class-specific details, a history of
earlier contacts, an ask and a sign-off. A few tickets carry typos, non-ASCII names, currency symbols
or an emoji, as real ones do.

Standard library only: benchmarks and tests import it. The same ``(n, seed)`` always gives the same
tickets, on any platform.

    python -m worker.synthetic 1000 --seed 3 > tickets.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LABELS: tuple[str, ...] = ("billing", "technical", "account")

MEDIAN_WORDS = 30
SIGMA = 0.8  # log-normal shape: p90 ~ 84 words, p99 ~ 190
MIN_WORDS = 4
MAX_WORDS = 400
TYPO_RATE = 0.10
EMOJI_RATE = 0.06


@dataclass(frozen=True)
class SyntheticTicket:
    id: str
    text: str
    label: str

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "text": self.text, "label": self.label}, ensure_ascii=False)


# ---- slot values ----------------------------------------------------------------------------------

FIRST_NAMES = (
    "Anna", "Ben", "Carlos", "Chloé", "David", "Emma", "Fatima", "François", "Grace", "Hiroshi",
    "Ingrid", "James", "José", "Karim", "Laura", "Łukasz", "Maria", "Mohammed", "Nina", "Olivia",
    "Priya", "Renée", "Sam", "Siobhán", "Søren", "Tom", "Wei", "Yusuf", "Zoë", "Björn",
)  # fmt: skip
LAST_NAMES = (
    "Smith", "García", "Müller", "Nguyễn", "O'Brien", "Kowalski", "Rossi", "Tanaka", "Johansson",
    "Dubois", "Patel", "Okafor", "Jensen", "Novák", "Brown", "Fernández", "Kim", "Lefèvre",
)  # fmt: skip
AGENTS = ("Mark", "Jenny", "Alex", "Priscilla", "Dan", "Sofía", "Raj", "Kate")
PLANS = ("Starter", "Pro", "Team", "Business", "Enterprise", "Pro annual", "Team monthly")
ADDONS = ("extra storage", "priority support", "SMS credits", "the analytics add-on", "extra seats")
DEVICES = (  # (device, its operating system)
    ("iPhone 13", "iOS 17.5"), ("iPhone 15 Pro", "iOS 18.1"), ("Pixel 8", "Android 14"),
    ("Galaxy S23", "Android 14"), ("iPad Air", "iPadOS 17"), ("MacBook Pro", "macOS Sonoma"),
    ("Dell XPS laptop", "Windows 11 23H2"), ("Windows 11 PC", "Windows 11 24H2"), ("Chromebook", "ChromeOS"),
    ("OnePlus 11", "Android 13"), ("Surface Pro", "Windows 10"), ("ThinkPad", "Ubuntu 22.04"),
)  # fmt: skip
BROWSERS = ("Chrome 126", "Firefox 127", "Safari 17", "Edge", "Brave")
FEATURES = (
    "file sync", "CSV export", "the calendar integration", "push notifications", "the search",
    "the Slack integration", "shared folders", "the reports page", "offline mode", "the webhooks",
    "the dashboard", "bulk import", "the Google Drive connector",
)  # fmt: skip
ERRORS = (
    "E1042", "ERR_SYNC_TIMEOUT", "HTTP 500", "HTTP 429 Too Many Requests", "502 Bad Gateway",
    "0x80070005", "NullReferenceException", "code 7 (connection reset)", "ETIMEDOUT", "E_QUOTA_EXCEEDED",
    "'Something went wrong. Please try again.'", "SSL_ERROR_BAD_CERT_DOMAIN",
)  # fmt: skip
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)  # fmt: skip
CARDS = ("Visa", "Mastercard", "Amex", "debit card", "company card", "PayPal")
EMAIL_DOMAINS = ("gmail.com", "outlook.com", "yahoo.co.uk", "acme-corp.com", "web.de", "proton.me")
EMOJI = ("🙏", "😡", "🙂", "😤", "👍", "😩", "🤞", "‼️")


def _amount(rng: random.Random, style: int) -> str:
    """A price in one of a few currency styles; ``style`` is fixed per ticket (one customer, one currency)."""
    value = rng.choice((4.99, 9.0, 12.5, 19.99, 29.0, 49.0, 79.99, 99.0, 149.0, 240.0, 1188.0))
    if style == 0:
        return f"€{value:.2f}".replace(".", ",")
    if style == 1:
        return f"{value:.2f} EUR"
    if style == 2:
        return f"£{value:.2f}"
    if style == 3:
        return f"¥{round(value * 160):,}"
    return f"${value:.2f}"


def _date(rng: random.Random) -> str:
    day = rng.randint(1, 28)
    month = rng.randrange(12)
    style = rng.randrange(4)
    if style == 0:
        return f"{MONTHS[month]} {day}"
    if style == 1:
        return f"{day:02d}.{month + 1:02d}.{rng.choice((2024, 2025))}"
    if style == 2:
        return f"{month + 1}/{day}"
    return f"the {day}{_ordinal(day)} of {MONTHS[month]}"


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


# ---- templates ------------------------------------------------------------------------------------
# {first}, {last}, {plan}, {device}, {os}, {email} are fixed per ticket so a ticket stays self-consistent.

ISSUES: dict[str, tuple[str, ...]] = {
    "billing": (
        "I was charged twice for my {plan} subscription this month.",
        "My card was charged {amount} on {date} but I cancelled my subscription in {month}.",
        "I requested a refund for {amount} on {date} and it still hasn't arrived.",
        "The invoice {invoice} shows {amount} but my plan is supposed to cost {amount2}.",
        "Why did my bill go up to {amount} without any notice?",
        "My free trial turned into a paid {plan} plan and I was charged {amount} without a reminder.",
        "I need an invoice with our company VAT number on it for the {month} payment.",
        "The discount code from your newsletter was not applied at checkout.",
        "I downgraded to {plan} but I'm still being billed the old price.",
        "There's a charge of {amount} for {addon} that I never added.",
        "My renewal payment failed and now there's a late fee of {amount} on my account.",
        "I was billed in euros instead of pounds and my bank charged a conversion fee.",
        "How do I change the card you charge for the {plan} plan?",
        "I got charged {amount} after upgrading mid-cycle, the proration doesn't look right.",
        "Please cancel my subscription and refund the last payment of {amount}.",
        "We are a registered charity and should be tax exempt, but VAT was added to invoice {invoice}.",
    ),
    "technical": (
        "The app crashes as soon as I open it on my {device}.",
        "{feature} stopped working after the last update, I get error {error}.",
        "I can't upload files larger than {mb} MB, the upload just hangs at 99%.",
        "Your API keeps returning {error} for requests that worked yesterday.",
        "The web dashboard won't load in {browser}, it's just a blank white page.",
        "Sync between my {device} and the desktop app is broken since {date}.",
        "Push notifications no longer arrive on my {device} running {os}.",
        "The CSV export is missing rows, I only get {big} of the records.",
        "Our webhooks stopped firing on {date}; nothing reaches our endpoint.",
        "Everything is extremely slow today, pages take over {n} seconds to load.",
        "The Slack integration disconnects every few hours with error {error}.",
        "After updating to version {version} the app freezes on the loading screen.",
        "Search returns no results even for documents I can see in the folder.",
        "Images in shared folders show as broken thumbnails on {browser}.",
        "The desktop app shows {error} when it tries to connect to the server.",
        "Offline mode loses my edits when my {device} reconnects.",
    ),
    "account": (
        "I can't log in to my account, the password reset email never arrives.",
        "I lost my phone and can't get the two-factor code anymore.",
        "Please change the email on my account from {email} to my new work address.",
        "I want to delete my account and all of my data.",
        "Someone logged in to my account from another country, I think I've been hacked.",
        "How do I transfer ownership of our workspace to a colleague?",
        "My account got locked after too many login attempts.",
        "I have two accounts by mistake, can you merge them into {email}?",
        "I need to remove a former employee from our team account.",
        "I can't change my username, the field is greyed out.",
        "Your identity verification keeps rejecting my passport photo.",
        "Please update the company name on our account, we rebranded.",
        "I'm not receiving the verification email to confirm my address {email}.",
        "How do I give a team member admin permissions?",
        "My account was suspended and I don't know why.",
        "I'd like to deactivate my account temporarily while I'm travelling.",
    ),
}

TERSE: dict[str, tuple[str, ...]] = {
    "billing": (
        "charged twice this month??",
        "refund still not received",
        "need a VAT invoice pls",
        "wrong amount on invoice {invoice}",
        "cancel my subscription",
        "why was I charged {amount}",
    ),
    "technical": (
        "app keeps crashing",
        "sync broken again",
        "getting {error} on upload",
        "dashboard won't load",
        "API down? {error}",
        "export not working",
    ),
    "account": (
        "can't log in",
        "reset email not arriving",
        "locked out of my account",
        "please delete my account",
        "change my email address",
        "lost my 2FA phone",
    ),
}

DETAILS: dict[str, tuple[str, ...]] = {
    "billing": (
        "The charge shows up on my {card} statement twice, both on {date}.",
        "My last invoice was {amount} instead of the usual {amount2}.",
        "The invoice number is {invoice} if that helps.",
        "I'm on the {plan} plan and I pay monthly by {card}.",
        "My bank says the payment went through on their side on {date}.",
        "I checked the billing page and it lists a payment of {amount} that I don't recognise.",
        "Our finance department needs this corrected before the end of {month}.",
        "I never agreed to the new pricing and I don't remember getting an email about it.",
        "The receipt was sent to {email} but it doesn't show our company address.",
        "I have screenshots of both transactions from my banking app.",
    ),
    "technical": (
        "The error message says {error}.",
        "I'm using my {device} with {os}.",
        "I've already tried clearing the cache, reinstalling the app and restarting my {device}.",
        "It happens in {browser} as well, so I don't think it's the browser.",
        "This started right after the update to version {version}.",
        "It works on my colleague's machine but not on mine.",
        "About {n} out of every 10 attempts fail, the rest go through.",
        "Our logs show the request timing out after roughly 30 seconds.",
        "The problem affects {feature} too, which we rely on every day.",
        "I can reproduce it every time: open the app, go to settings, tap sync, and it fails.",
    ),
    "account": (
        "The account is registered under {email}.",
        "I no longer have access to the phone number ending in {digits}.",
        "I've tried the 'forgot password' link {n} times and checked my spam folder.",
        "The login attempt came from a device I don't own, according to the security email.",
        "I'm the only admin on the workspace, so nobody else can change this.",
        "I can confirm my identity with the last four digits of the card, {digits}.",
        "The workspace has {team} members who can't access anything while I'm locked out.",
        "I changed jobs and the old email address {email} no longer exists.",
        "Under GDPR I'd also like a copy of the data you hold about me.",
        "I signed up with Google originally but now want to use a normal password.",
    ),
}

HISTORY: tuple[str, ...] = (
    "I've been a customer since {year} and I've never had a problem like this before.",
    "I already contacted support on {date} (ticket #{ticketno}) but nobody got back to me.",
    "{agent} from your team told me it would be fixed within 48 hours, that was {n} days ago.",
    "I was told to wait for an email from the specialist team, which never came.",
    "Before that everything worked fine for about {n} months.",
    "Your chatbot just keeps sending me links to the help center, which don't cover this.",
    "We're a small team of {team} people and we rely on this every single day.",
    "I followed every step in the help article, twice.",
    "On {date2} I got an automated reply saying the issue was resolved, but it isn't.",
    "I also posted in the community forum, and other users seem to have the same problem.",
    "My manager is asking me for an update and I have nothing to tell her.",
    "Last year something similar happened and {agent} sorted it out in a day, so I know it can be done.",
    "I have a presentation on {date} and I need this working before then.",
    "This is the third time I'm writing about the same issue.",
    "To be honest I'm considering switching to another provider if this isn't resolved.",
    "I understand things go wrong, but the lack of communication is what bothers me most.",
)

# Reusable with fresh slot values once the sentences above run out: what the longest tickets are made of.
EPISODES: tuple[str, ...] = (
    "On {date} I {action}, and {outcome}.",
    "Then on {date} I {action}, but {outcome}.",
    "A few days later I {action}; {outcome}.",
)
ACTIONS: tuple[str, ...] = (
    "called your hotline and waited {n}0 minutes on hold",
    "sent another email with all the details",
    "reinstalled everything from scratch",
    "spoke to {agent} in the live chat",
    "filled in the contact form again",
    "checked with my bank",
    "asked our IT department to have a look",
    "tried again from a different computer and network",
)
OUTCOMES: tuple[str, ...] = (
    "nothing changed",
    "I was told someone would call me back, which never happened",
    "the case was closed without an answer",
    "it worked for a day and then broke again",
    "I got a reference number ({ticketno}) and nothing else",
    "they said it was on your side",
)

ASKS: dict[str, tuple[str, ...]] = {
    "billing": (
        "Please refund the duplicate charge.",
        "Can you correct the invoice and send me a new one?",
        "Please make sure I'm not charged again.",
        "Could you explain what this charge is for?",
    ),
    "technical": (
        "Is there a workaround until it's fixed?",
        "Can someone from the technical team look into this?",
        "Is this a known issue on your side?",
        "Please let me know if you need logs.",
    ),
    "account": (
        "Please help me get back into my account.",
        "Can you confirm once this has been done?",
        "What do you need from me to verify that I'm the owner?",
        "Please make the change as soon as possible.",
    ),
}
GENERIC_ASKS = ("Can you please look into this?", "Please advise.", "What should I do?", "Thanks in advance.")
GREETINGS = (
    "Hi,",
    "Hello,",
    "Hi there,",
    "Dear Support,",
    "Hey team,",
    "Good morning,",
    "Hello support team,",
)
SIGN_OFFS = (
    "Thanks,\n{first}",
    "Best regards,\n{first} {last}",
    "Cheers, {first}",
    "Kind regards, {first} {last}",
    "— {first}",
    "Thank you!\n{first}\n\nSent from my iPhone",
)


_SLOTS: dict[str, Callable[[random.Random], str]] = {
    "date": _date,
    "date2": _date,
    "month": lambda r: r.choice(MONTHS),
    "agent": lambda r: r.choice(AGENTS),
    "addon": lambda r: r.choice(ADDONS),
    "browser": lambda r: r.choice(BROWSERS),
    "feature": lambda r: r.choice(FEATURES),
    "error": lambda r: r.choice(ERRORS),
    "card": lambda r: r.choice(CARDS),
    "invoice": lambda r: f"INV-{r.randint(2022, 2025)}-{r.randint(1, 99999):05d}",
    "ticketno": lambda r: str(r.randint(100000, 999999)),
    "digits": lambda r: f"{r.randint(0, 9999):04d}",
    "version": lambda r: f"{r.randint(3, 9)}.{r.randint(0, 24)}.{r.randint(0, 9)}",
    "n": lambda r: str(r.randint(2, 14)),
    "big": lambda r: str(r.choice((25, 40, 120, 300, 1500, 12000))),
    "mb": lambda r: str(r.choice((10, 50, 100, 250, 500))),
    "year": lambda r: str(r.randint(2015, 2023)),
    "team": lambda r: str(r.choice((3, 5, 8, 12, 20, 45, 200))),
    "action": lambda r: r.choice(ACTIONS),
    "outcome": lambda r: r.choice(OUTCOMES),
}


# ---- assembly -------------------------------------------------------------------------------------

_SLOT = re.compile(r"\{(\w+)\}")


def _ascii_handle(name: str) -> str:
    """'Łukasz' -> 'lukasz', "s.o'brien" -> 's.obrien': what a mail address would really use."""
    folded = unicodedata.normalize("NFKD", name.translate(_FOLD)).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9.]", "", folded.lower())


_FOLD = str.maketrans({"Ł": "L", "ł": "l", "Ø": "O", "ø": "o"})


class _Writer:
    """Fills templates for one ticket; the customer, plan and device stay fixed within it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        handle = rng.choice((first, f"{first[0]}.{last}", f"{first}{rng.randint(1, 99)}"))
        self.currency = rng.randrange(6)
        device, os_name = rng.choice(DEVICES)
        self.fixed = {
            "first": first,
            "last": last,
            "plan": rng.choice(PLANS),
            "device": device,
            "os": os_name,
            "email": f"{_ascii_handle(handle)}@{rng.choice(EMAIL_DOMAINS)}",
        }

    def fill(self, template: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in self.fixed:
                return self.fixed[name]
            if name.startswith("amount"):
                return _amount(self.rng, self.currency)
            return _SLOTS[name](self.rng)

        return _SLOT.sub(one, template)

    def pick(self, options: Sequence[str]) -> str:
        return self.fill(self.rng.choice(options))


def _words(text: str) -> int:
    return len(text.split())


def _target_words(rng: random.Random) -> int:
    raw = rng.lognormvariate(math.log(MEDIAN_WORDS), SIGMA)
    return max(MIN_WORDS, min(MAX_WORDS, round(raw)))


def _body(writer: _Writer, label: str, target: int) -> str:
    rng = writer.rng
    if target < 9:
        return writer.pick(TERSE[label])

    greeting = rng.choice(GREETINGS) if rng.random() < 0.7 else ""
    sign_off = writer.fill(rng.choice(SIGN_OFFS)) if rng.random() < 0.6 else ""
    ask = writer.pick(ASKS[label] + GENERIC_ASKS)
    overhead = _words(greeting) + _words(sign_off) + _words(ask)
    budget = target - overhead

    # The issue comes first, then details of this class, then (for longer tickets) the history.
    paragraphs: list[list[str]] = [[writer.pick(ISSUES[label])]]
    details = list(DETAILS[label])
    history = list(HISTORY)
    rng.shuffle(details)
    rng.shuffle(history)
    used = _words(paragraphs[0][0])
    while used < budget:
        # Long tickets alternate between facts and story, a new paragraph every few sentences.
        if details and (not history or rng.random() < 0.55):
            sentence = writer.fill(details.pop())
        elif history:
            sentence = writer.fill(history.pop())
        else:
            sentence = writer.pick(EPISODES)
        if used + _words(sentence) > MAX_WORDS - overhead:
            break
        if len(paragraphs[-1]) >= rng.randint(3, 5):
            paragraphs.append([])
        paragraphs[-1].append(sentence)
        used += _words(sentence)
    if target > 40 and rng.random() < 0.5:
        paragraphs.append([ask])
    else:
        paragraphs[-1].append(ask)

    text = "\n\n".join(" ".join(p) for p in paragraphs)
    if greeting:
        text = f"{greeting}\n\n{text}" if target > 40 else f"{greeting}\n{text}"
    if sign_off:
        text = f"{text}\n\n{sign_off}"
    return text


def _typo(rng: random.Random, text: str) -> str:
    """One realistic slip: swapped, dropped or doubled letter, or a missing apostrophe."""
    words = text.split(" ")
    candidates = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    if not candidates:
        return text
    i = rng.choice(candidates)
    w = words[i]
    j = rng.randrange(1, len(w) - 1)
    kind = rng.randrange(4)
    if kind == 0:
        w = w[: j - 1] + w[j] + w[j - 1] + w[j + 1 :]
    elif kind == 1:
        w = w[:j] + w[j + 1 :]
    elif kind == 2:
        w = w[:j] + w[j] + w[j:]
    else:
        return text.replace("n't", "nt", 1).replace("I'm", "Im", 1)
    words[i] = w
    return " ".join(words)


def _ticket(rng: random.Random, label: str) -> str:
    writer = _Writer(rng)
    text = _body(writer, label, _target_words(rng))
    if rng.random() < TYPO_RATE:
        for _ in range(rng.randint(1, 3)):
            text = _typo(rng, text)
        if rng.random() < 0.3:
            text = text.lower()
    if rng.random() < EMOJI_RATE:
        text = f"{text} {rng.choice(EMOJI)}"
    return text


def generate(n: int, seed: int = 0) -> list[SyntheticTicket]:
    """``n`` tickets, labels balanced to within one, in a seeded random order."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    labels = [LABELS[i % len(LABELS)] for i in range(n)]
    rng.shuffle(labels)
    return [
        SyntheticTicket(f"syn-{seed}-{i:06d}", _ticket(rng, label), label) for i, label in enumerate(labels)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m worker.synthetic", description="Write N synthetic support tickets as JSONL to stdout."
    )
    parser.add_argument("n", type=int, help="how many tickets")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("n must be >= 0")
    out = sys.stdout.buffer
    for ticket in generate(args.n, args.seed):
        out.write(ticket.to_json().encode("utf-8") + b"\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
