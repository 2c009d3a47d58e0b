"""Every command behaves as a Unix tool (issue 81): a reader that leaves (`| head`) ends the
command quietly, with no message and no traceback, as README's `telemetry export ... | head
-3` must."""

from __future__ import annotations

import subprocess
import sys

import orjson

from testkit.database import command_env

MAC = "aa:bb:cc:00:81:01"


async def test_a_closed_standard_output_ends_a_command_quietly(make_client, settings):
    client = await make_client(settings)
    records = [orjson.dumps({"event_type": "flow", "src_ip": "192.168.1.2",
                             "dest_ip": "198.51.100.7", "dest_port": 443, "n": n,
                             "padding": "x" * 200}) for n in range(2_000)]
    for _ in range(10):
        answer = await client.post("/log/cfm", data=b"\n".join(records), headers={
            "X-ID": MAC, "Content-Type": "application/x-ndjson"})
        assert answer.status == 200
    # 6 MB, far more than a pipe holds: the command writes after its reader has gone.
    reader = subprocess.Popen([sys.executable, "-m", "ops.cli", "telemetry", "export",
                               "--mac", MAC], env=command_env(settings),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout.readline().startswith(b'{"event_type":"flow"')
    reader.stdout.close()
    stderr = reader.stderr.read().decode()
    reader.stderr.close()
    assert reader.wait(timeout=120) == 141 and stderr == "", stderr
