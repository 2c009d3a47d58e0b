"""The console: web pages for support (read) and operators (read and tune) under /console/,
rendered on the server with aiohttp-jinja2 and working without JavaScript. `app.py` builds
the sub-application, `auth.py` holds credentials, sessions and CSRF (the sessions' table in
`session_sql.py`), `views.py` the pages and forms, `story.py` what one router's page shows
(read by `sql.py`, with the payloads read through server/generation), `charts.py` the bars of
its charts, `hunting.py` the Hunt page and a router's records carrying an indicator; every
change goes through server/tuning like the commands' (docs/console.md).
"""
