"""The secured local broker: TLS material, one SCRAM principal per role, the authorizer.

With `kafka_security = "sasl_ssl"` the client listener takes SCRAM-SHA-512 over TLS only,
and the broker's StandardAuthorizer denies what no ACL allows (`stack.acls` grants them).
The controller listener, which only the nodes use, takes TLS with client certificates: a
node's certificate makes it the `broker` principal, a super user as `admin` is. Every
secret is generated here, on first use, random, readable by its owner only: nothing ships
with a default password.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from txstream.config import Settings

# The principals: `admin` (super user, for ACLs and the stack's own probes), the three
# services, and `client` for everything else (loaders, the CLI, OLTP clients).
PRINCIPALS = ("admin", "worker", "sequencer", "coordinator", "client")
NODE_PRINCIPAL = "broker"
DAYS = 825


class SecurityError(RuntimeError):
    """The TLS material or the secrets could not be made."""


def ensure_secrets(settings: Settings) -> None:
    """A password file per principal and the HTTP token, each made once."""
    folder = settings.secrets_dir
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in (*(f"{p}.password" for p in PRINCIPALS), "http.token"):
        path = folder / name
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(24) + "\n")


def password(settings: Settings, principal: str) -> str:
    return (settings.secrets_dir / f"{principal}.password").read_text().strip()


def tls_dir(settings: Settings) -> Path:
    return settings.home / "tls"


def ensure_tls(settings: Settings) -> None:
    """A CA of our own and the nodes' certificate (PEM, the key unencrypted and readable by
    its owner only), valid for the broker's host name, made once with openssl."""
    folder = tls_dir(settings)
    node = folder / "node.pem"
    if node.exists() and settings.ca_file.exists():
        return
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_key, ca = folder / "ca.key", settings.ca_file
    key, csr, cert = folder / "node.key", folder / "node.csr", folder / "node.crt"
    host = settings.kafka_host
    san = f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}"
    ext = folder / "node.ext"
    ext.write_text(f"subjectAltName={san},DNS:localhost\n")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
             "-days", DAYS, "-subj", "/CN=txstream-local-ca")  # fmt: skip
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key)
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={NODE_PRINCIPAL}")
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", DAYS, "-extfile", ext)  # fmt: skip
    node.touch(mode=0o600)
    node.write_text(key.read_text() + cert.read_text())
    ca_key.chmod(0o600)
    for path in (key, csr, cert, ext, folder / "ca.srl"):
        path.unlink(missing_ok=True)


def _openssl(*args: object) -> None:
    try:
        done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
    except FileNotFoundError:
        raise SecurityError("openssl is not installed; run `make setup`") from None
    if done.returncode != 0:
        raise SecurityError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def broker_properties(settings: Settings) -> str:
    """The secured listeners, TLS and authorizer lines of a node's server.properties."""
    node_pem = tls_dir(settings) / "node.pem"
    admin = password(settings, "admin")
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{admin}";'
    )
    return "\n".join([
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "inter.broker.listener.name=SASL_SSL",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={node_pem}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={settings.ca_file}",
        "listener.name.controller.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/,DEFAULT",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:admin;User:{NODE_PRINCIPAL}",
        "allow.everyone.if.no.acl.found=false",
        "",
    ])  # fmt: skip


def scram_format_args(settings: Settings) -> list[str]:
    """`kafka-storage format` arguments that store every principal's SCRAM credential in
    the cluster's first metadata, so the brokers can authenticate from their first start."""
    args: list[str] = []
    for principal in PRINCIPALS:
        secret = password(settings, principal)
        args += ["--add-scram", f"SCRAM-SHA-512=[name={principal},password={secret}]"]
    return args
