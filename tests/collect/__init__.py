"""Tests of affmon.collect: what reads /proc and /sys, on recorded trees and live processes."""
