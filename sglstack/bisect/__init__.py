"""`invoke bisect`: find the SGLang commit or release that changed a serving metric.

Pure parts: `stats` (Pinpoint-style comparisons), `planner` (which ref next, when to stop), `metrics`
(samples from smoke reports), `releases` (release ranges). Records: `log` (the resumable JSON-lines
log), `report` (report.json, Markdown and chart). The loop that builds and smokes: `driver`.
"""
