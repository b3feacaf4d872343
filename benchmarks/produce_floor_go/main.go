// The compiled floor responder of benchmarks/produce_floor.py: librdkafka's one-partition
// Produce requests (v9-v12, flexible, topics by name) answered with the least any broker must
// do per request, in Go instead of Python, so the floor's own per-request CPU is as small as a
// compiled broker's: read the frame, one write of the record batch to its partition's file
// (opened before the produce), an answer with the next base offset, the answers to every
// request of one read in one write. Every other request (ApiVersions, Metadata) is relayed to
// the Python floor (-upstream), whose Metadata names this process as the broker.
//
// Not a broker: it validates nothing and keeps nothing but files and offsets. It exists to
// bound what any broker could give this client on this machine (issue 21 item 1).
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type floor struct {
	root     string
	upstream string
	mu       sync.Mutex
	files    map[string]*os.File
	scanned  time.Time // the directory's modification time when openAll last read it
	next     map[string]int64
	requests atomic.Int64
}

func main() {
	root := flag.String("root", "", "the Python floor's directory (partition files, counts)")
	portFile := flag.String("port-file", "", "where the bound port is written")
	upstream := flag.String("upstream", "", "host:port of the Python floor")
	flag.Parse()
	if *root == "" || *portFile == "" || *upstream == "" {
		fmt.Fprintln(os.Stderr, "usage: producefloor -root DIR -port-file FILE -upstream HOST:PORT")
		os.Exit(2)
	}
	f := &floor{root: *root, upstream: *upstream, files: map[string]*os.File{},
		next: map[string]int64{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := os.WriteFile(*portFile, []byte(strconv.Itoa(port)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { // the Produce count, for the benchmark's requests column
		for {
			os.WriteFile(filepath.Join(*root, "requests-go"),
				[]byte(strconv.FormatInt(f.requests.Load(), 10)), 0o644)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go f.serve(conn)
	}
}

func (f *floor) serve(conn net.Conn) {
	defer conn.Close()
	var up net.Conn
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	buf := make([]byte, 0, 1<<20)
	chunk := make([]byte, 256<<10)
	var out []byte
	for {
		n, err := conn.Read(chunk)
		if n > 0 {
			buf = append(buf, chunk[:n]...)
			at := 0
			out = out[:0]
			for len(buf)-at >= 4 {
				size := int(int32(binary.BigEndian.Uint32(buf[at:])))
				if size < 8 || len(buf)-at-4 < size {
					break
				}
				frame := buf[at+4 : at+4+size]
				key := int16(binary.BigEndian.Uint16(frame))
				if key == 0 {
					answer, perr := f.produce(frame)
					if perr != nil {
						fmt.Fprintln(os.Stderr, "closing:", perr)
						return
					}
					out = append(out, answer...)
				} else {
					if up == nil {
						if up, err = net.Dial("tcp", f.upstream); err != nil {
							fmt.Fprintln(os.Stderr, err)
							return
						}
					}
					answer, rerr := relay(up, buf[at:at+4+size])
					if rerr != nil {
						fmt.Fprintln(os.Stderr, rerr)
						return
					}
					out = append(out, answer...)
					if key == 3 { // Metadata: a topic named now has its files created
						f.openAll()
					}
				}
				at += 4 + size
			}
			buf = append(buf[:0], buf[at:]...)
			if len(out) > 0 {
				if _, werr := conn.Write(out); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func relay(up net.Conn, request []byte) ([]byte, error) {
	if _, err := up.Write(request); err != nil {
		return nil, err
	}
	head := make([]byte, 4)
	if _, err := io.ReadFull(up, head); err != nil {
		return nil, err
	}
	answer := make([]byte, 4+int(binary.BigEndian.Uint32(head)))
	copy(answer, head)
	_, err := io.ReadFull(up, answer[4:])
	return answer, err
}

// openAll opens the partition files the Python floor created that are not open yet. It reads
// the directory only when its modification time moved (a file was created): librdkafka's own
// Metadata request falls inside the timed produce, and the directory holds every earlier run's
// files.
func (f *floor) openAll() {
	info, err := os.Stat(f.root)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if info.ModTime().Equal(f.scanned) {
		return
	}
	entries, err := os.ReadDir(f.root)
	if err != nil {
		return
	}
	f.scanned = info.ModTime()
	for _, e := range entries {
		name := e.Name()
		if _, ok := f.files[name]; ok || !strings.HasPrefix(name, "floor-") {
			continue // open already, or not a partition's file (counts, ports, logs)
		}
		file, err := os.OpenFile(filepath.Join(f.root, name), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			f.files[name] = file
		}
	}
}

type reader struct {
	b  []byte
	at int
}

var errShort = errors.New("a field runs past the frame")

func (r *reader) i16() (int16, error) {
	if r.at+2 > len(r.b) {
		return 0, errShort
	}
	v := int16(binary.BigEndian.Uint16(r.b[r.at:]))
	r.at += 2
	return v, nil
}

func (r *reader) i32() (int32, error) {
	if r.at+4 > len(r.b) {
		return 0, errShort
	}
	v := int32(binary.BigEndian.Uint32(r.b[r.at:]))
	r.at += 4
	return v, nil
}

func (r *reader) uvarint() (int, error) {
	v, n := binary.Uvarint(r.b[r.at:])
	if n <= 0 {
		return 0, errShort
	}
	r.at += n
	return int(v), nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || r.at+n > len(r.b) {
		return nil, errShort
	}
	v := r.b[r.at : r.at+n]
	r.at += n
	return v, nil
}

func (r *reader) skipTags() error {
	count, err := r.uvarint()
	for i := 0; err == nil && i < count; i++ {
		if _, err = r.uvarint(); err == nil {
			var size int
			if size, err = r.uvarint(); err == nil {
				_, err = r.bytes(size)
			}
		}
	}
	return err
}

// compact reads a compact (nullable) string or bytes: length+1 as an unsigned varint.
func (r *reader) compact() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil || n == 0 {
		return nil, err
	}
	return r.bytes(n - 1)
}

func (f *floor) produce(frame []byte) ([]byte, error) {
	r := &reader{b: frame, at: 2}
	version, _ := r.i16()
	correlation, _ := r.i32()
	if version < 9 || version > 12 {
		return nil, fmt.Errorf("Produce v%d: the Go floor reads v9-v12", version)
	}
	clientLen, err := r.i16() // the header's client id is a classic nullable string
	if err == nil && clientLen > 0 {
		_, err = r.bytes(int(clientLen))
	}
	if err == nil {
		err = r.skipTags()
	}
	if err == nil {
		_, err = r.compact() // transactional id
	}
	acks, _ := r.i16()
	r.i32() // timeout
	topics, err2 := r.uvarint()
	if err == nil {
		err = err2
	}
	if err != nil || topics != 2 {
		return nil, fmt.Errorf("not a one-topic Produce request (%v)", err)
	}
	name, err := r.compact()
	parts, err2 := r.uvarint()
	if err != nil || err2 != nil || parts != 2 {
		return nil, errors.New("not a one-partition Produce request")
	}
	index, _ := r.i32()
	records, err := r.compact()
	if err != nil || len(records) < 61 || records[16] != 2 {
		return nil, errors.New("the Go floor reads one record batch of format v2")
	}
	key := string(name) + "-" + strconv.Itoa(int(index))
	f.mu.Lock()
	file := f.files[key]
	base := f.next[key]
	f.next[key] = base + int64(binary.BigEndian.Uint32(records[57:]))
	f.mu.Unlock()
	if file == nil {
		return nil, fmt.Errorf("partition %s was not named by Metadata first", key)
	}
	if _, err := file.Write(records); err != nil {
		return nil, err
	}
	f.requests.Add(1)
	if acks == 0 {
		return nil, nil
	}
	// ProduceResponse v9-v12 (flexible), header v1.
	out := make([]byte, 0, 64+len(name))
	out = binary.BigEndian.AppendUint32(out, 0) // size, set below
	out = binary.BigEndian.AppendUint32(out, uint32(correlation))
	out = append(out, 0) // header tagged fields
	out = append(out, 2) // one topic
	out = binary.AppendUvarint(out, uint64(len(name)+1))
	out = append(out, name...)
	out = append(out, 2) // one partition
	out = binary.BigEndian.AppendUint32(out, uint32(index))
	out = binary.BigEndian.AppendUint16(out, 0)            // error code
	out = binary.BigEndian.AppendUint64(out, uint64(base)) // base offset
	out = binary.BigEndian.AppendUint64(out, ^uint64(0))   // log append time -1
	out = binary.BigEndian.AppendUint64(out, 0)            // log start offset
	out = append(out, 1, 0, 0, 0)                          // no record errors, null message, tags, topic tags
	out = binary.BigEndian.AppendUint32(out, 0)            // throttle time
	out = append(out, 0)                                   // tagged fields
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}
