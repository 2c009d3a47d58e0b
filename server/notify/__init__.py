"""Notifications: the types and their fixed texts (`texts.py`), what a request's fields may
hold (`fields.py`), one send with its idempotency key (`sends.py`), delivery and the retry
loop (`service.py`), email over SMTP or to an outbox folder (`mailer.py`), the API's JSON of
stored notifications (`records.py`); their SQL: `sql.py` (the records, and what the threat
intelligence stores of its own in them) and `key_sql.py` (the idempotency keys).
"""
