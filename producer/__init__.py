"""ticketq's producer side: the wire protocol and a small client. Light: never imports torch."""
