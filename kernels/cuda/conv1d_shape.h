/* The shape every conv1d kernel geometry starts with
 * (kernels/cuda/conv1d_geo.h, conv1d_tc32_geo.h): plain C, shared by the
 * host adapters and both kernel compilers, filled by gpa__conv_shape_of
 * (ops/conv1d/cuda_igemm.c). Every value fits an int (the adapters
 * decline larger tensors). */
#ifndef GPA_CONV1D_SHAPE_H
#define GPA_CONV1D_SHAPE_H

typedef struct gpa_conv_shape {
  int B, Cin, L, Cout, K, stride, pad_l, dil, G, Lout, cin_g, cout_g;
  /* 1: channels last, x and dx [B][L][Cin], y and dy [B][Lout][Cout]
   * (the SIMT kernels of conv1d.cu; the other kernels' adapters decline it) */
  int nlc;
} gpa_conv_shape;

#endif
