"""The word tables of :mod:`tools.synthetic`: slot values and the templates a ticket is grown from."""

from __future__ import annotations

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
