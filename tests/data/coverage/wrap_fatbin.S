/* A shared object that carries a fat binary the way nvcc's host code does: the fatbin in the
   `.nv_fatbin` section, and its wrapper (magic 0x466243b1, version 1, pointer to the data) in
   `.nvFatBinSegment`. cuobjdump reads the fatbin from there, as it does in sgl-kernel's libraries.
   FATBIN is the path of the fatbin, passed by make_fixtures.sh. */
    .section .nv_fatbin, "a"
    .balign 8
sglstack_fatbin_data:
    .incbin FATBIN

    .section .nvFatBinSegment, "aw"
    .balign 8
sglstack_fatbin_wrapper:
    .long 0x466243b1
    .long 1
    .quad sglstack_fatbin_data
    .quad 0
