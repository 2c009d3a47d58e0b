"""The notification types this service sends, their required field and their fixed texts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NotificationType:
    name: str               # stored `type`
    path: str               # POST /api/notifications/<path>
    field: str              # required request field besides userId and recipient
    metadata_key: str       # where that field is stored in `metadata`
    title: str              # {value} is the field's value
    message: str
    reply: str              # the fixed sentence of the 200 answer


TYPES = (
    NotificationType(
        "vulsource_update", "vulsource-update", "versionNumber", "version_number",
        "Vulnerability sources updated to version {value}",
        "The vulnerability sources were updated to version {value}. Scans started from now on "
        "use the new sources.",
        "vulsource_update notification sent."),
    NotificationType(
        "scan_failed", "scan-failed", "projectId", "project_id",
        "Scan failed for project {value}",
        "The scan of project {value} failed. Open the project to see what went wrong and start "
        "the scan again.",
        "scan_failed notification sent."),
    NotificationType(
        "scheduled_scan_finished", "scheduled-scan-finished", "projectId", "project_id",
        "Scheduled scan finished for project {value}",
        "The scheduled scan of project {value} has finished. Open the project to review the "
        "results.",
        "scheduled_scan_finished notification sent."),
)
