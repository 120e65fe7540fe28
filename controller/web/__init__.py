"""The read-only web dashboard of ``gflowd --web-port N``: ``view`` (pure: state files -> what the
page shows), ``server`` (HTTP on a thread of gflowd) and ``dashboard.html`` (the page)."""
