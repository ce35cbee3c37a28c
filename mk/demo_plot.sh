#!/usr/bin/env bash
# demo_plot.sh — the gnuplot script of make demo's loss plot (mk/demo.sh pipes it into gnuplot; tests/test_cli.sh
# reads its text): DIR/train_tiny.csv to DIR/train_tiny.png, then the same curve in ASCII.
# Text is noenhanced: gnuplot's enhanced mode would set the '_' of a recipe's name as a subscript (inkling2_small).
# usage: mk/demo_plot.sh DIR FLOOR
set -eu
D=$1; floor=$2
cat <<GP
set datafile separator ','
set xlabel 'step'; set ylabel 'loss (nats/token)'; set key top right; set grid
set terminal pngcairo size 900,560 noenhanced; set output '$D/train_tiny.png'
set termoption noenhanced
set title 'fourbit train recipes/tiny.lua (CPU): loss and the entropy floor'
plot '$D/train_tiny.csv' using 1:2 with lines lw 2 title 'tiny (inkling2_small numerics)', $floor with lines dt 2 lc rgb 'black' title 'entropy floor $floor'
set terminal dumb size 100,26 noenhanced; set output
set title 'loss by step (ASCII); the flat line is the entropy floor'; set key off; unset grid
plot '$D/train_tiny.csv' using 1:2 with lines, $floor with lines
GP
