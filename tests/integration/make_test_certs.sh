#!/usr/bin/env bash
# Makes the TLS test's certificates with the openssl CLI in DIR: two CAs
# (ca_a, ca_b), a server certificate from each (server_a, server_b; names
# localhost and 127.0.0.1) and a client certificate from each (client_a,
# client_b). Short-lived (2 days), P-256 keys, nothing reused across runs.
#   make_test_certs.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
for ca in ca_a ca_b; do
  key "$ca"
  openssl req -x509 -new -key "$ca.key" -out "$ca.pem" -days 2 -subj "/CN=convserve test $ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
done
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
printf 'extendedKeyUsage=clientAuth\n' > client.ext
for side in a b; do
  for role in server client; do
    name="${role}_${side}"
    key "$name"
    openssl req -new -key "$name.key" -out "$name.csr" -subj "/CN=convserve test $name"
    openssl x509 -req -in "$name.csr" -CA "ca_$side.pem" -CAkey "ca_$side.key" -CAcreateserial \
      -out "$name.pem" -days 2 -extfile "$role.ext" 2>/dev/null
  done
done
