package wav

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

func TestWriterPatchesSizesOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.wav")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, 16000)
	if err != nil {
		t.Fatal(err)
	}
	pcm := []byte{1, 0, 2, 0, 3, 0}
	w.Write(pcm[:2])
	w.Write(pcm[2:])
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, _ := os.ReadFile(path)
	if len(b) != 44+6 || !bytes.Equal(b[44:], pcm) {
		t.Fatalf("file is %d bytes", len(b))
	}
	if !bytes.Equal(b[:44], Header(16000, 6)) || w.NumSamples() != 3 {
		t.Fatal("header not patched")
	}
	le := binary.LittleEndian
	if string(b[0:4]) != "RIFF" || le.Uint32(b[4:]) != 42 || string(b[8:16]) != "WAVEfmt " ||
		le.Uint16(b[20:]) != 1 || le.Uint16(b[22:]) != 1 || le.Uint32(b[24:]) != 16000 ||
		le.Uint32(b[28:]) != 32000 || le.Uint16(b[32:]) != 2 || le.Uint16(b[34:]) != 16 ||
		string(b[36:40]) != "data" || le.Uint32(b[40:]) != 6 {
		t.Fatalf("bad header % x", b[:44])
	}
}

func TestNewWriterRefusesZeroRate(t *testing.T) {
	if _, err := NewWriter(nil, 0); err == nil {
		t.Fatal("want an error")
	}
}
