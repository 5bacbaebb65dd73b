#!/bin/sh
# veil-exporter package: before the files are unpacked (deb preinst, rpm %pre), make the system
# user and group the service runs as, so that the state directory can belong to them.
set -e
if ! getent group veil-exporter >/dev/null; then
	groupadd --system veil-exporter
fi
if ! getent passwd veil-exporter >/dev/null; then
	useradd --system --gid veil-exporter --home-dir /var/lib/veil-exporter --no-create-home \
		--shell /usr/sbin/nologin --comment "veil-exporter daemon" veil-exporter
fi
exit 0
