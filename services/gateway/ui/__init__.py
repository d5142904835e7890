"""The gateway's web UI: pages (``pages``), their charts (``charts``, Vega-Lite specifications
shared with the reports), the documents they show (``documents``, ``views``), the reports
(``report``), and the templates and static files they are rendered with."""
