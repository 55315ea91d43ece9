"""OGameData-style curation (GameGen-X §3.2) of trajectory stores and video folders into a clip
dataset: scene split, length filter, motion, quality and near-duplicate filters, camera-motion
labels and structured captions (docs/curation.md)."""

import os

# Set before OpenCV's FFmpeg backend first runs: an undecodable file gets one line in
# dropped.jsonl, not FFmpeg's messages on the terminal.
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
