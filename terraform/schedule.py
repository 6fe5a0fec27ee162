"""When scheduled actions fire: cron strings (AWS, GCP) and Azure autoscale recurrences.

Slot ``t`` of a day plan is local hour ``t``; of a week plan, hour ``t`` from Monday 00:00 local.
AWS and GCP take the IANA time zone as is. Azure autoscale takes Windows time-zone names: the
table below maps common IANA zones (per Unicode CLDR ``windowsZones.xml``); any other zone is
converted to UTC at its standard (non-daylight) offset, which is an hour off during DST.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import datetime, timedelta

from terraform.plan import DAY_NAMES, Window

WINDOWS_ZONES: dict[str, str] = {
    "UTC": "UTC",
    "Etc/UTC": "UTC",
    "Etc/GMT": "UTC",
    "GMT": "UTC",
    "America/New_York": "Eastern Standard Time",
    "America/Toronto": "Eastern Standard Time",
    "America/Detroit": "Eastern Standard Time",
    "US/Eastern": "Eastern Standard Time",
    "America/Chicago": "Central Standard Time",
    "US/Central": "Central Standard Time",
    "America/Winnipeg": "Central Standard Time",
    "America/Denver": "Mountain Standard Time",
    "US/Mountain": "Mountain Standard Time",
    "America/Edmonton": "Mountain Standard Time",
    "America/Phoenix": "US Mountain Standard Time",
    "America/Los_Angeles": "Pacific Standard Time",
    "US/Pacific": "Pacific Standard Time",
    "America/Vancouver": "Pacific Standard Time",
    "America/Anchorage": "Alaskan Standard Time",
    "Pacific/Honolulu": "Hawaiian Standard Time",
    "America/Halifax": "Atlantic Standard Time",
    "America/St_Johns": "Newfoundland Standard Time",
    "America/Mexico_City": "Central Standard Time (Mexico)",
    "America/Sao_Paulo": "E. South America Standard Time",
    "America/Argentina/Buenos_Aires": "Argentina Standard Time",
    "America/Bogota": "SA Pacific Standard Time",
    "America/Lima": "SA Pacific Standard Time",
    "America/Santiago": "Pacific SA Standard Time",
    "Europe/London": "GMT Standard Time",
    "Europe/Dublin": "GMT Standard Time",
    "Europe/Lisbon": "GMT Standard Time",
    "Europe/Paris": "Romance Standard Time",
    "Europe/Brussels": "Romance Standard Time",
    "Europe/Madrid": "Romance Standard Time",
    "Europe/Copenhagen": "Romance Standard Time",
    "Europe/Berlin": "W. Europe Standard Time",
    "Europe/Amsterdam": "W. Europe Standard Time",
    "Europe/Zurich": "W. Europe Standard Time",
    "Europe/Rome": "W. Europe Standard Time",
    "Europe/Stockholm": "W. Europe Standard Time",
    "Europe/Oslo": "W. Europe Standard Time",
    "Europe/Vienna": "W. Europe Standard Time",
    "Europe/Warsaw": "Central European Standard Time",
    "Europe/Prague": "Central Europe Standard Time",
    "Europe/Budapest": "Central Europe Standard Time",
    "Europe/Helsinki": "FLE Standard Time",
    "Europe/Kyiv": "FLE Standard Time",
    "Europe/Kiev": "FLE Standard Time",
    "Europe/Athens": "GTB Standard Time",
    "Europe/Bucharest": "GTB Standard Time",
    "Europe/Istanbul": "Turkey Standard Time",
    "Europe/Moscow": "Russian Standard Time",
    "Asia/Dubai": "Arabian Standard Time",
    "Asia/Riyadh": "Arab Standard Time",
    "Asia/Qatar": "Arab Standard Time",
    "Asia/Jerusalem": "Israel Standard Time",
    "Asia/Kolkata": "India Standard Time",
    "Asia/Calcutta": "India Standard Time",
    "Asia/Singapore": "Singapore Standard Time",
    "Asia/Kuala_Lumpur": "Singapore Standard Time",
    "Asia/Hong_Kong": "China Standard Time",
    "Asia/Shanghai": "China Standard Time",
    "Asia/Taipei": "Taipei Standard Time",
    "Asia/Tokyo": "Tokyo Standard Time",
    "Asia/Seoul": "Korea Standard Time",
    "Asia/Jakarta": "SE Asia Standard Time",
    "Asia/Bangkok": "SE Asia Standard Time",
    "Australia/Sydney": "AUS Eastern Standard Time",
    "Australia/Melbourne": "AUS Eastern Standard Time",
    "Australia/Brisbane": "E. Australia Standard Time",
    "Australia/Perth": "W. Australia Standard Time",
    "Australia/Adelaide": "Cen. Australia Standard Time",
    "Pacific/Auckland": "New Zealand Standard Time",
    "Africa/Johannesburg": "South Africa Standard Time",
    "Africa/Cairo": "Egypt Standard Time",
    "Africa/Lagos": "W. Central Africa Standard Time",
    "Africa/Nairobi": "E. Africa Standard Time",
}

CYCLE = {"day": 24, "week": 168}


def cron(slot: int, origin: str) -> str:
    """Unix cron (minute hour dom month dow, Sunday = 0) for the start of ``slot``."""
    if origin == "week":
        return f"0 {slot % 24} * * {(slot // 24 + 1) % 7}"
    return f"0 {slot % 24} * * *"


def window_hours(window: Window, origin: str) -> int:
    """How long a window lasts, wrapping around the cycle (a window from slot s to s is a whole cycle)."""
    cycle = CYCLE[origin]
    return (window.end_slot - window.start_slot) % cycle or cycle


@dataclass(frozen=True)
class Recurrence:
    timezone: str
    days: tuple[str, ...]
    hour: int
    minute: int


def azure_recurrence(slot: int, origin: str, tz: str) -> Recurrence:
    """Azure autoscale recurrence for the start of ``slot``, in a Windows time zone."""
    windows_tz = WINDOWS_ZONES.get(tz)
    hour, minute, day = slot % 24, 0, slot // 24
    if windows_tz is None:
        windows_tz = "UTC"
        offset = _standard_offset_minutes(tz)
        total = (day * 24 + hour) * 60 - offset
        total %= (7 if origin == "week" else 1) * 24 * 60
        day, rem = divmod(total, 24 * 60)
        hour, minute = divmod(rem, 60)
    days = (DAY_NAMES[day],) if origin == "week" else DAY_NAMES
    return Recurrence(windows_tz, days, hour, minute)


def _standard_offset_minutes(tz: str) -> int:
    """The zone's UTC offset in January or July, whichever is smaller (its standard time)."""
    zone = zoneinfo.ZoneInfo(tz)
    offsets = []
    for month in (1, 7):
        off = datetime(2025, month, 15, 12, tzinfo=zone).utcoffset() or timedelta(0)
        offsets.append(int(off.total_seconds() // 60))
    return min(offsets)
