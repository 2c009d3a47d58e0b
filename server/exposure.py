"""Fail closed on a public address. When the service listens on an address that is not
loopback, each thing it would expose there must have been chosen by the operator, or the
start is refused with one line naming the settings to set:

- routers: ROUTER_AUTH set (not left at its default `mac`, where whoever knows a router's MAC
  reads its payloads and posts telemetry for it);
- the notification API: NOTIFICATION_API_TOKEN set, or the API off (SERVICES=router);
- the console: off (CONSOLE=false), on a listener of its own on a loopback or private
  address (CONSOLE_LISTEN), or CONSOLE=true set to serve it on the public address (behind TLS).

On loopback nothing is asked: README's first run needs no configuration.
"""

from __future__ import annotations

import ipaddress

from server.settings import Settings, SettingsError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to may be public


def is_private(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return is_loopback(host)
    return address.is_loopback or (address.is_private and not address.is_unspecified)


def unchosen(settings: Settings) -> list[str]:
    """What the public listener would expose that nobody chose, each with what to set."""
    if is_loopback(settings.listen_host):
        return []
    missing = []
    if "router" in settings.services and "ROUTER_AUTH" not in settings.chosen:
        missing.append("ROUTER_AUTH (key: routers need their own key, from ENROLLMENT_TOKEN "
                       "or `router-backend subscriptions add`; mac: whoever knows a MAC acts "
                       "as that router)")
    if "notifications" in settings.services and not settings.notification_api_token:
        missing.append("NOTIFICATION_API_TOKEN (or SERVICES=router to serve no "
                       "notification API)")
    console_public = settings.console_listen is None or not is_private(
        settings.console_listen[0])
    if settings.console and console_public and "CONSOLE" not in settings.chosen:
        missing.append("CONSOLE_LISTEN on a loopback or private address (e.g. "
                       "127.0.0.1:8081), or CONSOLE=false, or CONSOLE=true to serve the console "
                       "on the public address (behind TLS)")
    return missing


def refuse_unchosen(settings: Settings) -> None:
    """SettingsError (the start refused, one line) unless every exposure was chosen."""
    missing = unchosen(settings)
    if missing:
        raise SettingsError(
            f"LISTEN_HOST {settings.listen_host} is not loopback, so what is served there "
            f"must be chosen; set {'; '.join(missing)} (docs/security.md)")


def chosen_risks(settings: Settings) -> list[str]:
    """Warnings for what an operator chose to expose on the public address."""
    if is_loopback(settings.listen_host):
        return []
    risks = []
    if "router" in settings.services and settings.router_auth == "mac":
        risks.append(f"routers are served on {settings.listen_host} with ROUTER_AUTH=mac: "
                     "whoever knows a router's MAC reads its payloads and posts telemetry "
                     "for it")
    if settings.console and settings.console_listen is None:
        risks.append(f"the console is served on {settings.listen_host}: sign-ins cross the "
                     "network, so put it behind TLS (ops/deploy/Caddyfile)")
    return risks
