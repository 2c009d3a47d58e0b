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

from engine.addresses import is_loopback, is_private
from server.settings import Settings, SettingsError


def unchosen(settings: Settings) -> list[str]:
    """What a public listener would expose that nobody chose, each with what to set. The
    console's own listener (CONSOLE_LISTEN) is judged on its own, whatever LISTEN_HOST is."""
    missing = []
    if settings.console and settings.console_listen is not None \
            and not is_private(settings.console_listen[0]) and "CONSOLE" not in settings.chosen:
        missing.append(f"CONSOLE_LISTEN on a loopback or private address (it is "
                       f"{settings.console_listen[0]}), or CONSOLE=true to serve the console "
                       "there (behind TLS)")
    if is_loopback(settings.listen_host):
        return missing
    if "router" in settings.services and "ROUTER_AUTH" not in settings.chosen:
        missing.append("ROUTER_AUTH (key: routers need their own key, from ENROLLMENT_TOKEN "
                       "or `router-backend subscriptions add`; mac: whoever knows a MAC acts "
                       "as that router)")
    if "notifications" in settings.services and not settings.notification_api_token:
        missing.append("NOTIFICATION_API_TOKEN (or SERVICES=router to serve no "
                       "notification API)")
    if settings.console and settings.console_listen is None and "CONSOLE" not in settings.chosen:
        missing.append("CONSOLE_LISTEN on a loopback or private address (e.g. "
                       "127.0.0.1:8081), or CONSOLE=false, or CONSOLE=true to serve the console "
                       "on the public address (behind TLS)")
    return missing


def refuse_unchosen(settings: Settings) -> None:
    """SettingsError (the start refused, one line) unless every exposure was chosen."""
    missing = unchosen(settings)
    if missing:
        where = (f"LISTEN_HOST {settings.listen_host} is not loopback"
                 if not is_loopback(settings.listen_host)
                 else f"CONSOLE_LISTEN {settings.console_listen[0]} is not private")
        raise SettingsError(f"{where}, so what is served there must be chosen; set "
                            f"{'; '.join(missing)} (docs/security.md)")


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
    if settings.fleet_enabled and not settings.service_addresses:
        risks.append("the fleet's list is on and SERVICE_ADDRESSES is unset: the public "
                     f"address routers reach this service at (other than {settings.listen_host}"
                     ") could be listed, and every router would block it; set "
                     "SERVICE_ADDRESSES")
    return risks
