module github.com/veil-exporter/veil-exporter/tools

go 1.26.8
