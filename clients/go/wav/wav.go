// Package wav writes 16-bit mono PCM WAV files incrementally: the header is written first
// with zero sizes and patched on Close, so audio can be appended as it streams in.
package wav

import (
	"encoding/binary"
	"errors"
	"io"
)

const headerSize = 44

// Writer appends PCM16 little-endian mono samples to a RIFF/WAVE file.
type Writer struct {
	w          io.WriteSeeker
	sampleRate int
	dataBytes  int64
	closed     bool
}

// NewWriter writes a provisional header to w and returns a Writer for PCM16 mono at sampleRate.
func NewWriter(w io.WriteSeeker, sampleRate int) (*Writer, error) {
	if sampleRate <= 0 {
		return nil, errors.New("wav: sample rate must be positive")
	}
	ww := &Writer{w: w, sampleRate: sampleRate}
	if _, err := w.Write(ww.header()); err != nil {
		return nil, err
	}
	return ww, nil
}

// Header returns a 44-byte PCM16 mono WAV header for dataBytes bytes of samples.
func Header(sampleRate int, dataBytes uint32) []byte {
	h := make([]byte, headerSize)
	copy(h[0:], "RIFF")
	binary.LittleEndian.PutUint32(h[4:], 36+dataBytes)
	copy(h[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(h[16:], 16)                   // fmt chunk size
	binary.LittleEndian.PutUint16(h[20:], 1)                    // PCM
	binary.LittleEndian.PutUint16(h[22:], 1)                    // mono
	binary.LittleEndian.PutUint32(h[24:], uint32(sampleRate))   // sample rate
	binary.LittleEndian.PutUint32(h[28:], uint32(sampleRate*2)) // byte rate
	binary.LittleEndian.PutUint16(h[32:], 2)                    // block align
	binary.LittleEndian.PutUint16(h[34:], 16)                   // bits per sample
	copy(h[36:], "data")
	binary.LittleEndian.PutUint32(h[40:], dataBytes)
	return h
}

func (w *Writer) header() []byte { return Header(w.sampleRate, uint32(w.dataBytes)) }

// Write appends PCM16 little-endian sample bytes.
func (w *Writer) Write(pcm []byte) (int, error) {
	if w.closed {
		return 0, errors.New("wav: write after close")
	}
	n, err := w.w.Write(pcm)
	w.dataBytes += int64(n)
	return n, err
}

// NumSamples written so far.
func (w *Writer) NumSamples() int64 { return w.dataBytes / 2 }

// Close patches the header's sizes (it does not close the underlying file).
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if _, err := w.w.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := w.w.Write(w.header()); err != nil {
		return err
	}
	_, err := w.w.Seek(0, io.SeekEnd)
	return err
}
