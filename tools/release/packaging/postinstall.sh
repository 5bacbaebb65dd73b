#!/bin/sh
# veil-exporter package: after the files are unpacked (deb postinst, rpm %post). The state
# directory belongs to the service user; on a first install the config directory becomes
# readable by the service's group (it holds the token files), on an upgrade a running service
# restarts onto the new binary and the config is left as the administrator has it.
set -e
first_install=no
case "$1" in
	configure) [ -z "$2" ] && first_install=yes ;;
	1) first_install=yes ;;
esac
chown veil-exporter:veil-exporter /var/lib/veil-exporter
chmod 0700 /var/lib/veil-exporter
if [ "$first_install" = yes ]; then
	chown root:veil-exporter /etc/veil-exporter /etc/veil-exporter/config.yaml
	chmod 0750 /etc/veil-exporter
	chmod 0640 /etc/veil-exporter/config.yaml
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if [ "$first_install" = yes ]; then
		echo "veil-exporter: edit /etc/veil-exporter/config.yaml (and put the token files beside it), then: systemctl enable --now veil-exporter"
	else
		systemctl try-restart veil-exporter.service >/dev/null 2>&1 || true
	fi
fi
exit 0
