#!/usr/bin/env bash
# Makes sure RabbitMQ and PostgreSQL answer on 127.0.0.1 for the tests. As root, installs
# them from Debian's packages when missing and starts them when stopped; otherwise it only
# checks and says what to do.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 1; done
  return 1
}

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-services: $1 is not answering on 127.0.0.1:$2 and this is not root;" \
         "start it yourself (see README.md, 'Running the tests')." >&2
    exit 1
  fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! port_open 5432; then
  need_root PostgreSQL 5432
  command -v pg_ctlcluster >/dev/null || apt_install postgresql
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  # Tests connect as postgres over TCP without a password, as on the project's machines.
  if ! grep -q "dlscope-tests" "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust # dlscope-tests' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_port 5432 || { echo "ensure-services: PostgreSQL did not start" >&2; exit 1; }
fi
echo "ensure-services: PostgreSQL answers on 127.0.0.1:5432"

if ! port_open 5672; then
  need_root RabbitMQ 5672
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
  rabbitmq-server -detached || true
  rabbitmqctl await_startup >/dev/null 2>&1 || true
  wait_port 5672 || { echo "ensure-services: RabbitMQ did not start" >&2; exit 1; }
fi
echo "ensure-services: RabbitMQ answers on 127.0.0.1:5672"

# Partitioned recording (DLSCOPE_RECORDER_PARTITIONS > 1) needs the consistent-hash exchange,
# a plugin shipped with rabbitmq-server; enabling it works offline.
if [ "$(id -u)" -eq 0 ] && command -v rabbitmq-plugins >/dev/null; then
  if ! rabbitmq-plugins list -e -m 2>/dev/null | grep -qx rabbitmq_consistent_hash_exchange; then
    rabbitmq-plugins enable rabbitmq_consistent_hash_exchange >/dev/null
  fi
  echo "ensure-services: RabbitMQ's consistent-hash exchange plugin is enabled"
fi
