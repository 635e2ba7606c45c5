package systemdunit

import (
	"fmt"
	"regexp"
	"strings"
)

// Assignment is one NAME=value pair.
type Assignment struct{ Name, Value string }

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseEnvironmentFile parses an EnvironmentFile= file as systemd does
// (env-file.c): NAME=value lines; '#' or ';' starts a comment at the start
// of a line only; whitespace around the name and the value is dropped; a
// value may open with single quotes (literal) or double quotes (where \ only
// escapes " \ ` $ and a newline); elsewhere \ takes the next character
// literally, and \ before a newline continues the line. systemd skips a
// line whose name is not a variable name; here that is an error.
func ParseEnvironmentFile(text string) ([]Assignment, error) {
	var out []Assignment
	p := envParser{s: text}
	for {
		p.skip(" \t\r\n")
		if p.eof() {
			return out, nil
		}
		if c := p.peek(); c == '#' || c == ';' {
			p.skipLine()
			continue
		}
		line := p.line
		key, ok := p.key()
		if !ok {
			return nil, fmt.Errorf("line %d: no '=' in %q", line, key)
		}
		if !envNameRE.MatchString(key) {
			return nil, fmt.Errorf("line %d: %q is not a variable name", line, key)
		}
		value, err := p.value()
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", line, key, err)
		}
		out = append(out, Assignment{Name: key, Value: value})
	}
}

type envParser struct {
	s    string
	i    int
	line int
}

func (p *envParser) eof() bool  { return p.i >= len(p.s) }
func (p *envParser) peek() byte { return p.s[p.i] }
func (p *envParser) next() byte {
	c := p.s[p.i]
	p.i++
	if c == '\n' {
		p.line++
	}
	return c
}

func (p *envParser) skip(set string) {
	if p.line == 0 {
		p.line = 1
	}
	for !p.eof() && strings.IndexByte(set, p.peek()) >= 0 {
		p.next()
	}
}

func (p *envParser) skipLine() {
	for !p.eof() && p.next() != '\n' {
	}
}

// key reads up to '=' and reports whether one was found on the line.
func (p *envParser) key() (string, bool) {
	start := p.i
	for !p.eof() {
		switch p.peek() {
		case '=':
			k := strings.TrimRight(p.s[start:p.i], " \t")
			p.next()
			return k, true
		case '\n':
			return p.s[start:p.i], false
		}
		p.next()
	}
	return p.s[start:p.i], false
}

func (p *envParser) value() (string, error) {
	p.skip(" \t")
	var b strings.Builder
	// Trailing unescaped whitespace of an unquoted value is dropped.
	keep := 0
	quotedStart := !p.eof() && (p.peek() == '"' || p.peek() == '\'')
	if quotedStart {
		q := p.next()
		for {
			if p.eof() {
				return "", fmt.Errorf("unterminated %c quote", q)
			}
			c := p.next()
			if c == q {
				break
			}
			if q == '"' && c == '\\' && !p.eof() {
				n := p.next()
				switch {
				case n == '\n':
					continue
				case strings.IndexByte("\"\\`$", n) >= 0:
					b.WriteByte(n)
				default:
					b.WriteByte('\\')
					b.WriteByte(n)
				}
				continue
			}
			b.WriteByte(c)
		}
		keep = b.Len()
	}
	for !p.eof() {
		c := p.next()
		switch {
		case c == '\n':
			return b.String()[:keep], nil
		case c == '\\':
			if p.eof() {
				return b.String()[:keep], nil
			}
			if n := p.next(); n != '\n' {
				b.WriteByte(n)
				keep = b.Len()
			}
		default:
			b.WriteByte(c)
			if c != ' ' && c != '\t' && c != '\r' {
				keep = b.Len()
			}
		}
	}
	return b.String()[:keep], nil
}
