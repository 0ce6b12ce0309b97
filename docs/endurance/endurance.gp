set terminal pngcairo size 800,500 noenhanced
set key outside right
set grid
set logscale y
set output 'wa_spare.png'
set title 'online serving: total WA against the SSD spare factor'
set xlabel 'spare factor'
set ylabel 'NAND bytes / K/V bytes'
plot for [i=2:7] 'wa_spare.dat' using 1:i with linespoints title columnhead(i)
set output 'wa_util.png'
set title 'online serving: total WA against utilization (cold data added), spare 0.07'
set xlabel 'mean utilization of the logical space'
plot for [i=2:7] 'wa_util.dat' using 1:i with linespoints title columnhead(i)
unset logscale y
set output 'erase_hist.png'
set title 'online serving: erase counts per block'
set xlabel 'erases'
set ylabel 'blocks'
plot for [i=0:5] 'erase_hist.dat' index i using 1:2 with linespoints title columnhead(1)
set output 'bytes_per_token.png'
set logscale y
set title 'NAND bytes per generated token'
set xlabel ''
set ylabel 'bytes'
set style data histogram
set style histogram clustered
set style fill solid 0.8
plot for [i=2:7] 'bytes_per_token.dat' using i:xtic(1) title columnhead(i)
