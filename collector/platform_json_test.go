package collector

// platformJSON: an object encoded as the controller sends it, for tests and benchmarks that
// push whole objects (json.Marshal of a veil type does not read back: a tag or an uptime has no
// json names of its own).

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/veil-exporter/veil-exporter/veil"
)

// platformJSON encodes v with each field under its json name, a tag as {verbose_name, colour}
// and an uptime as {uptime, start_time, system_time, timezone}.
func platformJSON(v any) ([]byte, error) {
	return json.Marshal(platformValue(reflect.ValueOf(v)))
}

func platformValue(v reflect.Value) any {
	if v.CanInterface() {
		switch x := v.Interface().(type) {
		case veil.Tag:
			return map[string]any{"verbose_name": x.Name, "colour": x.Colour}
		case veil.Uptime:
			return map[string]any{"uptime": x.Seconds, "start_time": x.StartTime, "system_time": x.SystemTime, "timezone": x.Timezone}
		case veil.Time:
			return x
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return platformValue(v.Elem())
	case reflect.Struct:
		m := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			m[name] = platformValue(v.Field(i))
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = platformValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
