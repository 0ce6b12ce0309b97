# kvbench decode --context: tokens/s against context length
set terminal png size 900,560
set output 'decode_context.png'
set title "decode, one sequence: 2 layers of 32 q / 8 kv heads x 128, f16; KV larger than the DRAM budget"
set xlabel 'context (tokens)'
set ylabel 'tokens/s per sequence'
set logscale x 2
set logscale y 10
set grid
set key top right
plot 'decode_context.dat' u 1:2 w lp lw 2 t 'kvflash, dense', \
     'decode_context.dat' u 1:3 w lp lw 2 t 'kvflash, SparF', \
     'decode_context.dat' u 1:4 w lp lw 2 t 'in-memory cache', \
     'decode_context.dat' u 1:5 w lp lw 2 t 'FlexGen-style reader'
