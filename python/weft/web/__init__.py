"""The web dashboard: a run (or every run on the machine) in a browser.

The pieces, each with one job:

* :mod:`~weft.web.assets`: the page's static files (plain HTML, JS and CSS
  shipped inside this package), read once and served with their type and
  ``ETag``;
* :mod:`~weft.web.pages`: which plain-HTTP request gets which page, as
  websockets ``Response`` values (no I/O): the run server's
  ``process_request`` hook calls :func:`~weft.web.pages.dashboard_response`,
  so the dashboard lives on the same port as the WebSocket endpoint;
* :mod:`~weft.web.listing`: the executions under a root directory and what
  the list page shows of each (state, hank, cost, age, live port), read from
  files without taking any lock;
* :mod:`~weft.web.machine`: ``weft ui``'s server: the list page, its JSON
  API behind a token, and for each execution opened either its live run's
  server or a read-only replay server over its journal (the same protocol
  server, without a runtime);
* ``static/``: ``index.html`` + ``app.js`` (one execution: replay, then
  follow, then steer), ``list.html`` + ``list.js`` (the executions),
  ``style.css``.

The browser side speaks the WebSocket protocol of ``docs/protocol.md`` and
nothing else: no endpoint exists only for the dashboard. Tokens travel in
the URL fragment (never sent to a server, so never in an access log) or a
login form; the page drops the fragment from the address bar once read.
See ``docs/dashboard.md``.
"""

from weft.web.pages import dashboard_response, dashboard_url

__all__ = ["dashboard_response", "dashboard_url"]
