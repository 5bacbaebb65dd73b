#!/bin/sh
# veil-exporter package: after the files went (deb postrm, rpm %postun). A purge also removes
# the state directory (the event positions); dpkg removes the config files itself. The user and
# group stay, as Debian's packages leave them: files elsewhere may still belong to them.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
	rm -rf /var/lib/veil-exporter
fi
exit 0
