package systemdunit

import (
	"fmt"
	"strconv"
	"strings"
)

const whitespace = " \t\n\r"

// splitWords splits s into words as systemd's extract_first_word does for
// ExecStart= and Environment=: separated by whitespace, with "…" and '…'
// quoting anywhere in a word, and, when unescape is set, C escapes (\n, \t,
// \s, \xNN, \\, \", \' …) inside and outside quotes.
func splitWords(s string, unescape bool) ([]string, error) {
	var words []string
	i := 0
	for {
		for i < len(s) && strings.IndexByte(whitespace, s[i]) >= 0 {
			i++
		}
		if i >= len(s) {
			return words, nil
		}
		var b strings.Builder
		var quote byte
		for ; i < len(s); i++ {
			c := s[i]
			if quote == 0 && strings.IndexByte(whitespace, c) >= 0 {
				break
			}
			switch {
			case c == '\\' && unescape:
				r, n, err := cEscape(s[i+1:])
				if err != nil {
					return nil, fmt.Errorf("in %q: %w", s, err)
				}
				b.WriteString(r)
				i += n
			case quote != 0 && c == quote:
				quote = 0
			case quote == 0 && (c == '"' || c == '\''):
				quote = c
			default:
				b.WriteByte(c)
			}
		}
		if quote != 0 {
			return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
		}
		words = append(words, b.String())
	}
}

// cEscape decodes the escape after a backslash at the start of s, returning
// the text and how many bytes of s it used.
func cEscape(s string) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("a backslash ends the line")
	}
	if r, ok := map[byte]string{'a': "\a", 'b': "\b", 'f': "\f", 'n': "\n", 'r': "\r", 't': "\t", 'v': "\v",
		's': " ", '\\': "\\", '"': "\"", '\'': "'"}[s[0]]; ok {
		return r, 1, nil
	}
	if s[0] == 'x' && len(s) >= 3 {
		if v, err := strconv.ParseUint(s[1:3], 16, 8); err == nil && v != 0 {
			return string(rune(v)), 3, nil
		}
	}
	return "", 0, fmt.Errorf("unsupported escape \\%c", s[0])
}

// specifiers resolves the unit-file specifiers in v; only %% (a percent
// sign) is supported, since the units this package reads use no other.
func specifiers(v, where string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+1 < len(v) && v[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		return "", fmt.Errorf("%s: specifier %q is not supported", where, v[i:min(i+2, len(v))])
	}
	return b.String(), nil
}

// expandWords expands the environment in ExecStart's words as systemd's
// replace_env_argv does: a word that is $NAME becomes the variable's value
// split at whitespace (quotes in it grouping words), zero words when unset
// or empty; in any other word ${NAME} becomes the value and $$ a dollar.
func expandWords(words []string, env map[string]string) ([]string, error) {
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, "$") && !strings.HasPrefix(w, "${") && !strings.HasPrefix(w, "$$") {
			split, err := splitWords(env[w[1:]], false)
			if err != nil {
				return nil, fmt.Errorf("expanding %s: %w", w, err)
			}
			out = append(out, split...)
			continue
		}
		out = append(out, expandBraced(w, env))
	}
	return out, nil
}

func expandBraced(w string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		switch {
		case strings.HasPrefix(w[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(w[i:], "${"):
			end := strings.IndexByte(w[i:], '}')
			if end < 0 {
				b.WriteString(w[i:])
				return b.String()
			}
			b.WriteString(env[w[i+2:i+end]])
			i += end
		default:
			b.WriteByte(w[i])
		}
	}
	return b.String()
}
