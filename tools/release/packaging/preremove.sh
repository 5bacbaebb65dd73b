#!/bin/sh
# veil-exporter package: before the files go (deb prerm, rpm %preun). On a removal, not an
# upgrade, stop and disable the service and its socket.
set -e
case "$1" in
	remove | 0)
		if [ -d /run/systemd/system ]; then
			systemctl --no-reload disable --now veil-exporter.service veil-exporter.socket >/dev/null 2>&1 || true
		fi
		;;
esac
exit 0
