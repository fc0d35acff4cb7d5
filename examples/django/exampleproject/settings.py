"""Settings of the example: Django's database from ``EXAMPLE_DATABASE_URL``
(``postgresql://user@host:port/name``; default: SQLite ``db.sqlite3`` beside this
project), Conveyor as the task backend.

* On PostgreSQL, Conveyor lives in Django's own database and an enqueue is part of the
  request's transaction (no ``URL`` option).
* On SQLite, Conveyor has its own file (``CONVEYOR_EXAMPLE_URL``, default
  ``conveyor.db`` beside this project), and an enqueue inside a transaction is written
  when it commits.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("EXAMPLE_SECRET_KEY", "example-only-not-a-secret-0123456789abcdef")
DEBUG = os.environ.get("EXAMPLE_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "conveyor.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "exampleproject.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
LOGIN_URL = "/admin/login/"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def database(url: str) -> dict[str, object]:
    parts = urlsplit(url)
    if parts.scheme in ("postgresql", "postgres"):
        return {"ENGINE": "django.db.backends.postgresql", "NAME": unquote(parts.path[1:]),
                "USER": unquote(parts.username or ""), "PASSWORD": unquote(parts.password or ""),
                "HOST": parts.hostname or "", "PORT": parts.port or ""}
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}


DATABASES = {"default": database(
    os.environ.get("EXAMPLE_DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}

_ON_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
TASKS = {
    "default": {
        "BACKEND": "conveyor.contrib.django.ConveyorBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {} if _ON_POSTGRES else {
            "URL": os.environ.get("CONVEYOR_EXAMPLE_URL") or f"sqlite:///{BASE_DIR / 'conveyor.db'}",
        },
    },
}
